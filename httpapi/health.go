package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// Lease is one lease as GET /v1/leases returns it. Times are RFC 3339 UTC,
// in database time; Expired is as of the read.
type Lease struct {
	Name       string `json:"name"`
	Holder     string `json:"holder"`
	Epoch      int64  `json:"epoch"`
	ExpiresAt  string `json:"expires_at"`
	AcquiredAt string `json:"acquired_at,omitempty"`
	RenewedAt  string `json:"renewed_at,omitempty"`
	Expired    bool   `json:"expired"`
}

// LeaseList is the body of GET /v1/leases, ordered by name.
type LeaseList struct {
	Leases []Lease `json:"leases"`
}

// healthz is GET /healthz: 200 while the process works, 503 if it believes
// it leads but missed its renew deadline.
func (a *api) healthz(w http.ResponseWriter, r *http.Request) {
	if err := a.cfg.Elector.Healthy(); err != nil {
		writeText(w, http.StatusServiceUnavailable, "unhealthy: "+err.Error())
		return
	}
	writeText(w, http.StatusOK, "ok")
}

// readyz is GET /readyz. Its body is one line of key=value pairs:
//
//	mode=leader|follower holder_id=<this node> leader=<lease holder> lease_epoch=<n> lease_expires_at=<RFC 3339 UTC>
//
// with status 200, where leader, lease_epoch and lease_expires_at describe
// the lease as last observed (this node's own while it leads). The answer is
// 503 with mode=stopping while the node shuts down, and with
// mode=unavailable and a reason otherwise:
//
//	reason=starting               the elector has not reached the database yet (within DBUnreachableAfter of New)
//	reason=db_unreachable         no successful database call for longer than DBUnreachableAfter (db_last_contact_age says how long, or "never")
//	reason=db_write_failed        the node can reach its database but not write its lease row (db_error says why): a read-only or full SQLite file, a read-only replica, missing grants
//	reason=renew_deadline_missed  the node believes it leads but missed its renew deadline
//	reason=dispatch_starting      the node leads and its dispatcher is building its schedule (LeaderDispatch)
//	reason=dispatch_failing       the node leads but its dispatcher cannot build or refresh its schedule (dispatch_error says why); it resigns the lease unless that recovers
//	reason=dispatch_stuck         the node leads but its dispatch loop has not turned for twice its refresh period + 5 s (a statement that hangs)
//	reason=replication_not_synchronous  the node requires synchronous replication (Config.WriteCheck) and its database does not have it
//
// With Config.Durability set, the line ends with how durable the node's
// writes are: durability=single|synchronous|asynchronous|unknown
// standbys=<n> sync_standbys=<n>.
//
// A follower's own queries can be rare (an advisory follower waits on its
// session lock), so when its last contact is older than half of
// DBUnreachableAfter the probe reads the lease row itself, once at a time.
func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	status, line := a.readiness(r.Context(), false)
	writeText(w, status, line)
}

// Readiness returns a function that computes the readiness line GET
// /readyz would answer on h (a handler New returned) and whether it would
// be 200, for the node's status record (history.Presence): it never
// probes the database and leaves the database contact out of the verdict
// (the record's own write proves it; a node that cannot write it goes
// stale instead). It returns nil for any other handler.
func Readiness(h http.Handler) func() (ready bool, line string) {
	a, ok := h.(*api)
	if !ok {
		return nil
	}
	return func() (bool, string) {
		status, line := a.readiness(context.Background(), true)
		return status == http.StatusOK, line
	}
}

// readiness is the status and body of /readyz; record: as Readiness says.
func (a *api) readiness(ctx context.Context, record bool) (int, string) {
	st := a.cfg.Elector.Status()
	if now := a.clock.Now(); !record && !a.cfg.Stopping() && (st.LastContact.IsZero() || now.Sub(st.LastContact) > a.cfg.DBUnreachableAfter/2) {
		pctx, cancel := context.WithTimeout(ctx, min(2*time.Second, a.cfg.DBUnreachableAfter/4))
		_ = a.cfg.Elector.Probe(pctx)
		cancel()
		st = a.cfg.Elector.Status()
	}
	now := a.clock.Now()
	mode, reason, contact, detail := "follower", "", "", ""
	dispatch := a.cfg.Scheduler.Dispatch()
	switch {
	case a.cfg.Stopping():
		mode = "stopping"
	case a.cfg.Elector.Healthy() != nil:
		mode, reason = "unavailable", "renew_deadline_missed"
	case st.LastContact.IsZero():
		mode, reason = "unavailable", "starting"
		if !record && now.Sub(a.start) > a.cfg.DBUnreachableAfter {
			reason, contact = "db_unreachable", "never"
		}
	case !record && now.Sub(st.LastContact) > a.cfg.DBUnreachableAfter:
		// (A record does not judge the contact: see Readiness.)
		mode, reason = "unavailable", "db_unreachable"
		contact = now.Sub(st.LastContact).Round(time.Millisecond).String()
	case a.cfg.WriteCheck != nil && a.cfg.WriteCheck() != nil:
		// Refusing on purpose (its own acquires and renewals too): say
		// why rather than db_write_failed.
		reason = "replication_not_synchronous"
	case st.WriteError != nil && (!errors.Is(st.WriteError, sqlease.ErrTransient) || now.Sub(st.WriteFailingSince) > a.cfg.DBUnreachableAfter):
		mode, reason = "unavailable", "db_write_failed"
		detail = "db_error=" + oneWord(st.WriteError.Error())
	case st.Leading && a.cfg.LeaderDispatch && dispatch.Phase != scheduler.PhaseRunning:
		mode, reason = "unavailable", "dispatch_starting"
		if dispatch.Phase == scheduler.PhaseFailing || dispatch.Phase == scheduler.PhaseStuck {
			reason = "dispatch_" + dispatch.Phase
			if dispatch.Err != nil {
				detail = "dispatch_error=" + oneWord(dispatch.Err.Error())
			}
		}
	case st.Leading:
		mode = "leader"
	}
	if a.cfg.Singletons != nil && (mode == "leader" || mode == "follower") {
		// A node running a stuck singleton is not ready (the dead man's
		// switch); the mode stays as it is.
		if stale := a.cfg.Singletons.Stale(); len(stale) > 0 {
			reason = "singleton_stale"
			detail = "singleton_stale=" + strings.Join(stale, ",")
		}
	}

	var b strings.Builder
	field := func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k + "=" + v)
	}
	field("mode", mode)
	field("holder_id", st.HolderID)
	epoch := int64(0)
	if st.LeaderKnown {
		field("leader", st.Leader.Holder)
		epoch = st.Leader.Epoch
	}
	if st.Leading {
		epoch = st.Token.Epoch
	}
	field("lease_epoch", strconv.FormatInt(epoch, 10))
	if st.LeaderKnown {
		field("lease_expires_at", timestamp(st.Leader.ExpiresAt))
	}
	if reason != "" {
		field("reason", reason)
	}
	if contact != "" {
		field("db_last_contact_age", contact)
	}
	if detail != "" {
		b.WriteString(" " + detail)
	}
	if a.cfg.Durability != nil {
		b.WriteString(" " + a.cfg.Durability().String())
	}
	status := http.StatusOK
	if mode != "leader" && mode != "follower" || reason != "" {
		status = http.StatusServiceUnavailable
	}
	return status, b.String()
}

// listLeases is GET /v1/leases.
func (a *api) listLeases(w http.ResponseWriter, r *http.Request) {
	leases, err := a.cfg.Leases.Leases(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := LeaseList{Leases: make([]Lease, 0, len(leases))}
	for _, l := range leases {
		// Presence rows (history.Presence) fence nothing: they are not
		// leases to the API's readers; the dashboard shows them as nodes.
		if strings.HasPrefix(l.Name, sqlstore.NodeLeasePrefix) {
			continue
		}
		out.Leases = append(out.Leases, LeaseOut(l))
	}
	a.writeJSON(w, r, http.StatusOK, out)
}

// LeaseOut converts a lease to its API form.
func LeaseOut(l sqlease.Lease) Lease {
	return Lease{
		Name: l.Name, Holder: l.Holder, Epoch: l.Epoch,
		ExpiresAt: timestamp(l.ExpiresAt), AcquiredAt: timestamp(l.AcquiredAt), RenewedAt: timestamp(l.RenewedAt),
		Expired: !l.ObservedAt.IsZero() && l.Expired(),
	}
}

// writeText writes a one-line text/plain answer (health probes).
func writeText(w http.ResponseWriter, status int, line string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = fmt.Fprintln(w, line)
}

// oneWord makes an error message a value of the key=value probe line: its
// first 200 bytes, valid UTF-8, with blanks and '=' as '_'.
func oneWord(s string) string {
	if len(s) > 200 {
		s = s[:200]
	}
	s = strings.ToValidUTF8(s, "?")
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r == '=' || r == 0x7f {
			return '_'
		}
		return r
	}, s)
}
