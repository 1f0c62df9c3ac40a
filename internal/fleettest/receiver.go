package fleettest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/ledger"
)

// Delivery is one HTTP action call as the Receiver saw it.
type Delivery struct {
	Seq     int // arrival order
	Key     string
	Job     string
	SF      string // Sqlease-Scheduled-For
	Attempt int
	Epoch   int64
	Holder  string
	Start   time.Time // test's clock: request received
	End     time.Time // answered (the receiver's work done)
	HungUp  bool      // the sender had closed the connection by then
}

func (d Delivery) String() string {
	s := fmt.Sprintf("#%d %s attempt %d by %s@%d [%s – %s]", d.Seq, d.Key, d.Attempt, d.Holder, d.Epoch,
		d.Start.Format("15:04:05.000"), d.End.Format("15:04:05.000"))
	if d.HungUp {
		s += " (sender hung up)"
	}
	return s
}

// Receiver is a real HTTP server for the daemon's HTTP actions. It records
// every delivery and answers 200 after the delay its path asks for — a path
// ending in /delay/<duration> (e.g. /slow/delay/1500ms), else at once —
// working on it for that long even if the sender hangs up.
type Receiver struct {
	URL string // base URL, without a trailing slash

	mu      sync.Mutex
	seq     int
	open    map[int]*Delivery
	done    []Delivery
	ended   chan struct{} // closed and replaced on every delivery that ends
	arrived chan struct{} // closed and replaced on every delivery that starts
}

// NewReceiver starts a receiver; it is closed when the test ends.
func NewReceiver(t testing.TB) *Receiver {
	rc := &Receiver{open: map[int]*Delivery{}, ended: make(chan struct{}), arrived: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(srv.Close)
	rc.URL = srv.URL
	return rc
}

func (rc *Receiver) serve(w http.ResponseWriter, r *http.Request) {
	d := Delivery{
		Key:    r.Header.Get("Idempotency-Key"),
		Job:    r.Header.Get("Sqlease-Job"),
		SF:     r.Header.Get("Sqlease-Scheduled-For"),
		Holder: r.Header.Get("Sqlease-Holder"),
		Start:  time.Now(),
	}
	d.Attempt, _ = strconv.Atoi(r.Header.Get("Sqlease-Attempt"))
	d.Epoch, _ = strconv.ParseInt(r.Header.Get("Sqlease-Epoch"), 10, 64)
	rc.mu.Lock()
	rc.seq++
	d.Seq = rc.seq
	rc.open[d.Seq] = &d
	close(rc.arrived)
	rc.arrived = make(chan struct{})
	rc.mu.Unlock()

	var delay time.Duration
	if _, s, ok := strings.Cut(r.URL.Path, "/delay/"); ok {
		delay, _ = time.ParseDuration(s)
	}
	// The receiver works for the whole delay, whether or not the sender
	// hangs up meanwhile, as a real endpoint does: its side effects do not
	// stop when the client goes away.
	time.Sleep(delay)
	hungUp := r.Context().Err() != nil
	w.WriteHeader(http.StatusOK)
	rc.mu.Lock()
	d.End, d.HungUp = time.Now(), hungUp
	delete(rc.open, d.Seq)
	rc.done = append(rc.done, d)
	close(rc.ended)
	rc.ended = make(chan struct{})
	rc.mu.Unlock()
}

// Deliveries returns every delivery so far, in arrival order; one still
// open has a zero End.
func (rc *Receiver) Deliveries() []Delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := slices.Clone(rc.done)
	for _, d := range rc.open {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b Delivery) int { return a.Seq - b.Seq })
	return out
}

// Open returns the deliveries in progress.
func (rc *Receiver) Open() []Delivery {
	var out []Delivery
	for _, d := range rc.Deliveries() {
		if d.End.IsZero() {
			out = append(out, d)
		}
	}
	return out
}

// Unran waits up to timeout for a delivery of every job in jobs (one that
// ended, when ended is set) and returns, sorted, the jobs that had none by
// then: the accepted work a fault lost (internal/ledger's Unran).
func (rc *Receiver) Unran(jobs map[string]time.Time, timeout time.Duration, ended bool) []string {
	return ledger.Unran(jobs, timeout, func() map[string]bool {
		ran := map[string]bool{}
		for _, dl := range rc.Deliveries() {
			if !ended || !dl.End.IsZero() {
				ran[dl.Job] = true
			}
		}
		return ran
	})
}

// WaitFor waits up to timeout for a delivery matching pred (started, not
// necessarily ended) and reports it.
func (rc *Receiver) WaitFor(timeout time.Duration, pred func(Delivery) bool) (Delivery, bool) {
	deadline := time.Now().Add(timeout)
	for {
		for _, d := range rc.Deliveries() {
			if pred(d) {
				return d, true
			}
		}
		if time.Now().After(deadline) {
			return Delivery{}, false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Mark returns the number of deliveries so far: WaitFrom's from for the
// ones that come next.
func (rc *Receiver) Mark() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.seq
}

// WaitFrom waits up to timeout for a delivery after the first from (in
// arrival order) matching pred, and returns it as soon as it arrives.
func (rc *Receiver) WaitFrom(from int, timeout time.Duration, pred func(Delivery) bool) (Delivery, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		rc.mu.Lock()
		ch := rc.arrived
		rc.mu.Unlock()
		for _, d := range rc.Deliveries()[from:] {
			if pred(d) {
				return d, true
			}
		}
		select {
		case <-ch:
		case <-deadline.C:
			return Delivery{}, false
		}
	}
}

// Overlap is two deliveries of one occurrence that were in progress at
// once, the first one's sender still alive.
type Overlap struct {
	First, Second Delivery
	From, To      time.Time // the overlapping interval
}

func (o Overlap) String() string {
	return fmt.Sprintf("occurrence %s sent twice at once for %v (%s – %s): first %s; second %s",
		o.First.Key, o.To.Sub(o.From).Round(time.Millisecond), o.From.Format("15:04:05.000"), o.To.Format("15:04:05.000"), o.First, o.Second)
}

// Overlaps returns the pairs of deliveries with one idempotency key whose
// intervals intersect. A delivery counts until the receiver's work on it
// ended — a sender that hung up while alive may still act on the answer's
// absence, and the receiver's side effects go on — or until its sender was
// SIGKILLed (killedAt(holder), zero if never) if that came first; one
// still open counts until now.
func (rc *Receiver) Overlaps(killedAt func(holder string) time.Time) []Overlap {
	byKey := map[string][]Delivery{}
	for _, d := range rc.Deliveries() {
		byKey[d.Key] = append(byKey[d.Key], d)
	}
	now := time.Now()
	var out []Overlap
	for _, ds := range byKey {
		for i := range ds {
			a := ds[i]
			end := a.End
			if end.IsZero() {
				end = now
			}
			if k := killedAt(a.Holder); !k.IsZero() && k.Before(end) {
				end = k
			}
			for _, b := range ds[i+1:] {
				if b.Start.Before(end) {
					to := end
					if !b.End.IsZero() && b.End.Before(to) {
						to = b.End
					}
					out = append(out, Overlap{First: a, Second: b, From: b.Start, To: to})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b Overlap) int { return a.From.Compare(b.From) })
	return out
}

// Ledger returns the deliveries as action-ledger rows, in arrival order:
// each start of a send is an action by its holder under its epoch, stamped
// with the receiver's clock. ledger.Verify then finds two holders of one
// epoch, and a send under an epoch after a newer epoch had begun sending —
// a deposed leader still acting.
func (rc *Receiver) Ledger() []ledger.Row {
	var rows []ledger.Row
	for _, d := range rc.Deliveries() {
		rows = append(rows, ledger.Row{ID: int64(d.Seq), Holder: d.Holder, Epoch: d.Epoch, DBTime: d.Start, Note: d.Key})
	}
	return rows
}
