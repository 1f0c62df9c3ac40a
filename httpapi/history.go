package httpapi

import (
	"context"
	"net/http"
	"strconv"

	"github.com/sqlease/sqlease/sqlstore"
)

// HistoryReader reads the leadership history (*sqlstore.Store). The
// handler finds it on Config.Leases.
type HistoryReader interface {
	LeaseHistory(ctx context.Context, name string, before int64, limit int) ([]sqlstore.LeaseEvent, error)
}

// LeaseEvent is one event of GET /v1/leases/{name}/history.
type LeaseEvent struct {
	Event  string `json:"event"`
	Holder string `json:"holder"`
	Epoch  int64  `json:"epoch"`
	At     string `json:"at"`
	Reason string `json:"reason"`
}

// LeaseHistory is the body of GET /v1/leases/{name}/history, newest first.
type LeaseHistory struct {
	Events []LeaseEvent `json:"events"`
	Next   string       `json:"next,omitempty"`
}

// LeaseEventOut converts a history row to its API form.
func LeaseEventOut(e sqlstore.LeaseEvent) LeaseEvent {
	return LeaseEvent{Event: e.Event, Holder: e.Holder, Epoch: e.Epoch, At: timestamp(e.At), Reason: e.Reason}
}

// leaseHistory is GET /v1/leases/{name}/history?limit=&after=: the cursor
// is the last event's row id, so a read is one index range scan; a page is
// limit events or MaxPageBytes.
func (a *api) leaseHistory(w http.ResponseWriter, r *http.Request) {
	hr, ok := a.cfg.Leases.(HistoryReader)
	if !ok {
		writeProblem(w, http.StatusNotFound, "this node's store keeps no leadership history")
		return
	}
	p, after, ok := a.listPage(w, r)
	if !ok {
		return
	}
	var before int64
	if after != "" {
		var err error
		if before, err = strconv.ParseInt(after, 10, 64); err != nil || before < 1 {
			a.fail(w, r, badRequest("after: must be the next value of a previous page, got %q", after))
			return
		}
	}
	out := LeaseHistory{Events: []LeaseEvent{}}
	more, err := fill(p, func(n int) ([]sqlstore.LeaseEvent, error) {
		events, err := hr.LeaseHistory(r.Context(), r.PathValue("name"), before, n)
		if len(events) > 0 {
			before = events[len(events)-1].ID
		}
		return events, err
	}, func(e sqlstore.LeaseEvent) bool {
		eo := LeaseEventOut(e)
		if !p.fit(eo) {
			return false
		}
		out.Events, out.Next = append(out.Events, eo), strconv.FormatInt(e.ID, 10)
		return true
	})
	a.writePage(w, r, &out, &out.Next, more, err, a.fail)
}
