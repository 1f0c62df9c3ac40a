package scheduler

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// workerClaimAhead is how far past the database's now a claim-mode
// worker's claim from the start reaches, where the store can
// (Store.HasClaimStartAhead): the jobs due within it are claimed in the
// statement that claims those due now, and each starts at its own due time
// (claimOnce), so that no start waits and one round trip serves several
// jobs; the same statement says when the next job falls due past it, which
// the worker asked for with NextDue after each claim at a due instant. At
// 1,000 jobs/s falling due 1 ms apart, a worker made a claim and a NextDue
// per 2.1 jobs: ~300 µs of client CPU per job (-bench trickle). It is kept
// short for the reasons the leader's claimAhead is: what it claims is
// locked, and a one-off job's run recorded as running (from its
// occurrence), before it starts; a term that ends before then leaves the
// attempt to be reclaimed as any claim whose holder stopped. Under a
// backlog it claims no job ahead: the due ones fill the claim's limit
// first (due index order). Measured on PostgreSQL, 1,000 jobs/s, against
// the commit before, alternating, 3 rounds each (medians; a shared
// machine): statements per job 1.08 → 0.28, client CPU 279 → 146 µs per
// job, server 329 → 176 µs (-bench trickle); start delay p99 18.2 → 8.2 ms
// (-bench ontime -backlog 0 -ontime-ways claim). 10 ms: 0.24 statements
// per job, but client CPU within the noise of 5 ms (medians of 6 rounds
// each: 129 and 133 µs): what is left is paid per job (its own wakeup at
// its due time, its run), not per claim.
const workerClaimAhead = 5 * time.Millisecond

// testWorkerClaimAhead, set by tests, replaces workerClaimAhead: a scenario
// that must act between a claim and the start of a job claimed ahead needs
// more than 5 ms to do so reliably on a loaded machine.
var testWorkerClaimAhead atomic.Int64

// claimAndStart is ClaimAndStartNext (under w's worker lease when w is not
// nil) that, for a claim from the start where the store can, also claims
// the jobs due within workerClaimAhead; either way the ClaimNext is what
// the claim said of the next job due past what it claimed (ClaimPeek, or
// the claim ahead's own answer).
func (s *Scheduler) claimAndStart(ctx context.Context, w *workerTerm, slots int, from *claimFrom, peek bool) ([]sqlstore.Claimed, sqlstore.ClaimNext, error) {
	if from.after.IsZero() && s.store.HasClaimStartAhead() {
		ahead := workerClaimAhead
		if d := time.Duration(testWorkerClaimAhead.Load()); d > 0 {
			ahead = d
		}
		holder, epoch := s.cfg.Holder, int64(0)
		if w != nil {
			holder, epoch = w.tok.Holder, w.tok.Epoch
		}
		claimed, due, err := s.store.ClaimAheadAndStart(ctx, holder, epoch, slots, ahead)
		var next sqlstore.ClaimNext
		if err == nil && due.Known {
			// On this host's clock, from the answer's arrival: late by
			// its trip at most, as ClaimAndStartNext's.
			next.Known = true
			if !due.At.IsZero() {
				next.At = time.Now().Add(due.At.Sub(due.Now))
			}
		}
		return claimed, next, err
	}
	if w != nil {
		return s.store.ClaimAndStartUnderNext(ctx, w.tok, slots, from.after, peek)
	}
	return s.store.ClaimAndStartNext(ctx, s.cfg.Holder, slots, from.after, peek)
}

// awaitClaimedStart is awaitStartAt for a job a claim-mode worker claimed
// ahead: under a worker lease the start waits for its gate; without one
// (Run) only for at, while ctx (the runs' context) lives.
func (s *Scheduler) awaitClaimedStart(ctx context.Context, w *workerTerm, at time.Time) bool {
	var ensure func() error
	if w != nil {
		ensure = func() error { return w.gate.Ensure(w.tok) }
	}
	return awaitStartAt(ctx, at, ensure)
}

// awaitStartAt waits until at, the local start of a run claimed ahead (by
// the leader or a claim-mode worker), and then for ensure, the term's gate
// (nil: none), to pass, and reports whether the run may start: not once ctx
// (the term's, or the runs') has ended, or the gate refuses the term
// otherwise than as closed for now. A gate closed while the term lives
// (ErrNotLeader: a late heartbeat) is waited for, as awaitGate does: the
// run then starts late rather than its attempt being spent unrun.
func awaitStartAt(ctx context.Context, at time.Time, ensure func() error) bool {
	if d := time.Until(at); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
	for {
		if ensure == nil {
			return ctx.Err() == nil
		}
		err := ensure()
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			return true
		}
		if !errors.Is(err, sqlease.ErrNotLeader) {
			return false
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}
