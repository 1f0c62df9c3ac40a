package scheduler_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// settledGate is the acting gate of one term on a real store, whose
// earlier terms' holders may act until settled (as after an advisory
// takeover; election.Elector.PriorTermsEnd).
type settledGate struct {
	st      *sqlstore.Store
	tok     sqlease.Token
	settled time.Time
}

func (g *settledGate) Ensure(tok sqlease.Token) error {
	if tok != g.tok {
		return sqlease.ErrNotLeader
	}
	return nil
}

func (g *settledGate) Fenced(ctx context.Context, tok sqlease.Token, fn func(*sql.Tx) error) error {
	return g.st.Fenced(ctx, tok, fn)
}

func (g *settledGate) PriorTermsEnd(tok sqlease.Token) time.Time { return g.settled }

// leaderStarts claims job id under the leader lease tok and starts its
// attempt 1, in one fenced transaction, as a leader's dispatch does; it
// returns the occurrence.
func leaderStarts(t *testing.T, st *sqlstore.Store, tok sqlease.Token, id int64) time.Time {
	t.Helper()
	ctx := context.Background()
	var due time.Time
	if err := st.Fenced(ctx, tok, func(tx *sql.Tx) error {
		c, ok, err := st.ClaimJob(ctx, tx, id, tok)
		if err != nil || !ok {
			return errors.Join(err, errors.New("not claimed"))
		}
		due = c.NextRunAt
		_, err = st.StartRun(ctx, tx, c.Lock, c.Name, c.NextRunAt, 1, tok.Epoch)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return due
}

// leadTerm runs s.Lead under gate for the term tok until the test ends or
// stop is called.
func leadTerm(t *testing.T, s *scheduler.Scheduler, gate scheduler.Gate, tok sqlease.Token) (stop func()) {
	lctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Lead(lctx, gate, tok) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// interruptThenDrain has a leader "old" of lease start attempt 1 of job
// id and die; then a leader "new" claims the retry, defers it (its
// earlier terms may act a minute more) and drains, which must give the
// claim back. It returns the occurrence and the recorder of "new".
func interruptThenDrain(t *testing.T, st *sqlstore.Store, lease, job string, id int64) (time.Time, *recorder) {
	t.Helper()
	ctx := context.Background()
	// Long enough for leaderStarts on a busy machine (its fenced write
	// failed under a 100 ms lease there); the wait below is for its end.
	old, err := st.Acquire(ctx, lease, "old", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	due := leaderStarts(t, st, old.Token(), id)
	var l sqlease.Lease
	dbtest.WaitFor(t, 5*time.Second, "the old lease to expire", func() bool {
		l, err = st.Acquire(ctx, lease, "new", time.Minute)
		return err == nil
	})
	rec := &recorder{}
	s := newSched(t, scheduler.Config{Store: st, Handler: rec.handle})
	stop := leadTerm(t, s, &settledGate{st: st, tok: l.Token(), settled: time.Now().Add(time.Minute)}, l.Token())
	defer stop()
	dbtest.WaitFor(t, 5*time.Second, "the leader to claim it", func() bool {
		got, _ := st.Job(ctx, job)
		return got.LockedBy == "new"
	})
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	defer dcancel()
	began := time.Now()
	if err := s.Drain(dctx); err != nil {
		t.Fatalf("drain with a deferred retry: %v after %s", err, time.Since(began))
	}
	if err := st.Release(ctx, l.Token()); err != nil {
		t.Fatal(err)
	}
	return due, rec
}

// An occurrence interrupted under an earlier term is retried only once that
// term's holder can no longer be sending it (SPEC G3): not before the gate's
// PriorTermsEnd. A new occurrence is not delayed.
func TestLeaderDefersRetryOfInterruptedRun(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		admin := newSched(t, scheduler.Config{Store: st, Holder: "admin"})
		j, _, err := admin.Create(ctx, sqlease.Job{Name: "interrupted", Schedule: sqlease.Schedule{Every: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		// The old leader claims it and starts attempt 1, then vanishes
		// without a finish.
		tokA, err := st.Acquire(ctx, "lead", "old", time.Second) // outlives leaderStarts on a busy machine
		if err != nil {
			t.Fatal(err)
		}
		leaderStarts(t, st, tokA.Token(), j.ID)
		var tokB sqlease.Lease
		dbtest.WaitFor(t, 5*time.Second, "the old lease to expire", func() bool {
			tokB, err = st.Acquire(ctx, "lead", "new", time.Minute)
			return err == nil
		})
		if _, _, err := admin.Create(ctx, sqlease.Job{Name: "fresh"}); err != nil {
			t.Fatal(err)
		}

		var mu sync.Mutex
		started := map[string]time.Time{}
		rec := &recorder{fn: func(ctx context.Context, r sqlease.Run) error {
			mu.Lock()
			started[r.Job] = time.Now()
			mu.Unlock()
			return nil
		}}
		s := newSched(t, scheduler.Config{Store: st, Handler: rec.handle})
		wait := 800 * time.Millisecond
		gate := &settledGate{st: st, tok: tokB.Token(), settled: time.Now().Add(wait)}
		leadTerm(t, s, gate, tokB.Token())

		dbtest.WaitFor(t, 10*time.Second, "both jobs to run", func() bool { return rec.count() == 2 })
		mu.Lock()
		defer mu.Unlock()
		if started["fresh"].After(gate.settled) {
			t.Errorf("a new occurrence waited for the prior term: ran %s after it ended", started["fresh"].Sub(gate.settled))
		}
		if started["interrupted"].Before(gate.settled) {
			t.Fatalf("the interrupted occurrence was retried %s before the prior term's holder could no longer act",
				gate.settled.Sub(started["interrupted"]))
		}
		for _, r := range rec.snapshot() {
			if r.Job == "interrupted" && r.Attempt != 2 {
				t.Fatalf("retry as attempt %d, want 2", r.Attempt)
			}
		}
	})
}

// leadOnce runs an elector whose leadership drives s.Lead and records
// Lead's errors, until the test ends.
func leadOnce(t *testing.T, st *sqlstore.Store, s *scheduler.Scheduler, holder string, errs chan<- error) *election.Elector {
	t.Helper()
	cfg := election.Config{Store: st, HolderID: holder, LeaseName: "lead", ResignHoldoff: 3 * time.Second}
	return runElector(t, cfg, func(ctx context.Context, e *election.Elector, tok sqlease.Token) {
		if err := s.Lead(ctx, e, tok); err != nil {
			select {
			case errs <- err:
			default:
			}
		}
	})
}

func renameJobs(t *testing.T, st *sqlstore.Store, from, to string) {
	t.Helper()
	if _, err := st.DB().Exec("ALTER TABLE " + from + " RENAME TO " + to); err != nil {
		t.Fatal(err)
	}
}

// Leading means dispatching (SPEC G5): a leader whose schedule cannot be
// built keeps retrying for DispatchFailureLimit, says so through Dispatch,
// then resigns the lease so that another instance leads — which dispatches
// once the database lets it.
func TestLeadResignsWhenRebuildKeepsFailing(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		admin := newSched(t, scheduler.Config{Store: st, Holder: "admin"})
		if _, _, err := admin.Create(ctx, sqlease.Job{Name: "later", Schedule: sqlease.Schedule{Every: time.Hour}}); err != nil {
			t.Fatal(err)
		}
		renameJobs(t, st, "sqlease_jobs", "sqlease_jobs_away")

		limit := 400 * time.Millisecond
		errsA := make(chan error, 1)
		sa := newSched(t, scheduler.Config{Store: st, DispatchFailureLimit: limit, RefreshInterval: 50 * time.Millisecond})
		a := leadOnce(t, st, sa, "a", errsA)
		dbtest.WaitFor(t, 10*time.Second, "a to lead", a.IsLeader)
		dbtest.WaitFor(t, 5*time.Second, "a's dispatcher to report failing", func() bool {
			d := sa.Dispatch()
			return d.Phase == scheduler.PhaseFailing && d.Err != nil
		})
		failing := time.Now()
		select {
		case err := <-errsA:
			t.Logf("Lead returned after %s: %v", time.Since(failing), err)
		case <-time.After(5 * time.Second):
			t.Fatal("Lead kept failing without returning")
		}
		dbtest.WaitFor(t, 5*time.Second, "a to resign and release the lease", func() bool {
			l, err := st.Lease(ctx, "lead")
			return err == nil && l.Expired() && !a.IsLeader()
		})

		// b leads while a holds off, and dispatches once it can.
		rec := &recorder{}
		sb := newSched(t, scheduler.Config{Store: st, Handler: rec.handle, DispatchFailureLimit: time.Minute, RefreshInterval: 50 * time.Millisecond})
		b := leadOnce(t, st, sb, "b", make(chan error, 1))
		dbtest.WaitFor(t, 5*time.Second, "b to lead during a's holdoff", b.IsLeader)
		renameJobs(t, st, "sqlease_jobs_away", "sqlease_jobs")
		// "later" fell due at its creation: b may have claimed it already
		// (a conflict: it runs), or the trigger makes it due now.
		if _, err := admin.Trigger(ctx, "later"); err != nil && !errors.Is(err, sqlease.ErrConflict) {
			t.Fatal(err)
		}
		dbtest.WaitFor(t, 10*time.Second, "b to run the job", func() bool { return rec.count() >= 1 })
		if a.IsLeader() {
			t.Fatal("a leads again beside b")
		}
	})
}

// A refresh that keeps failing stops dispatch and, past the limit, ends the
// term; one that recovers within it keeps the term.
func TestLeadResignsWhenRefreshKeepsFailing(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		st := newStore(t)
		// The short outage below lasts a few refreshes on a quiet
		// machine, more than a second on a busy one: the limit is well
		// beyond it, and the long outage well beyond the limit.
		limit := 2 * time.Second
		errs := make(chan error, 1)
		s := newSched(t, scheduler.Config{Store: st, DispatchFailureLimit: limit, RefreshInterval: 50 * time.Millisecond})
		e := leadOnce(t, st, s, "a", errs)
		dbtest.WaitFor(t, 10*time.Second, "dispatch", func() bool { return s.Dispatch().Phase == scheduler.PhaseRunning })
		tok, _ := e.Require(context.Background())

		// A short outage: the term survives it.
		renameJobs(t, st, "sqlease_jobs", "sqlease_jobs_away")
		dbtest.WaitFor(t, 5*time.Second, "failing", func() bool { return s.Dispatch().Phase == scheduler.PhaseFailing })
		renameJobs(t, st, "sqlease_jobs_away", "sqlease_jobs")
		dbtest.WaitFor(t, 5*time.Second, "recovery", func() bool { return s.Dispatch().Phase == scheduler.PhaseRunning })
		if cur, err := e.Require(context.Background()); err != nil || cur != tok {
			t.Fatalf("a short refresh outage ended the term: %v %v", cur, err)
		}

		// A long one ends it.
		renameJobs(t, st, "sqlease_jobs", "sqlease_jobs_away")
		select {
		case err := <-errs:
			t.Logf("Lead: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("Lead kept its term through a refresh outage longer than the limit")
		}
		dbtest.WaitFor(t, 5*time.Second, "the term to end", func() bool {
			cur, err := e.Require(context.Background())
			return err != nil || cur != tok
		})
	})
}

// An occurrence whose attempt was interrupted is retried even when later
// occurrences fell due meanwhile: the missed-runs policy (run_once here)
// collapses occurrences that never started, not one that was accepted and
// started (SPEC G3). Leader mode and claim mode.
func TestInterruptedOccurrenceRetriedPastLaterOnes(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		for _, mode := range []string{"leader", "claim"} {
			t.Run(mode, func(t *testing.T) {
				ctx := context.Background()
				st := newStore(t)
				admin := newSched(t, scheduler.Config{Store: st, Holder: "admin"})
				for _, other := range []string{"every-leader", "every-claim"} { // the dialect's database is shared
					if err := admin.Delete(ctx, other); err != nil && !errors.Is(err, sqlease.ErrNoJob) {
						t.Fatal(err)
					}
				}
				name := "every-" + mode
				every := 200 * time.Millisecond
				j, _, err := admin.Create(ctx, sqlease.Job{Name: name, Schedule: sqlease.Schedule{Every: every},
					MissedRuns: sqlease.RunOnce, LockTimeout: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				// A dead executor's attempt 1 of the due occurrence.
				var due time.Time
				var tok sqlease.Token
				if mode == "leader" {
					l, err := st.Acquire(ctx, "lead", "old", 800*time.Millisecond) // stale after the sleep below
					if err != nil {
						t.Fatal(err)
					}
					tok = l.Token()
					due = leaderStarts(t, st, tok, j.ID)
				} else {
					claimed, err := st.ClaimDue(ctx, "dead", 1)
					if err != nil || len(claimed) != 1 {
						t.Fatalf("claim: %v %d", err, len(claimed))
					}
					c := claimed[0]
					due = c.NextRunAt
					if _, err := st.StartRun(ctx, nil, c.Lock, c.Name, c.NextRunAt, 1, c.Lock.Epoch); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(1100 * time.Millisecond) // later occurrences fall due; the lock and lease go stale

				rec := &recorder{}
				s := newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: rec.handle})
				if mode == "leader" {
					var l sqlease.Lease
					dbtest.WaitFor(t, 5*time.Second, "the old lease to expire", func() bool {
						l, err = st.Acquire(ctx, "lead", "new", time.Minute)
						return err == nil
					})
					leadTerm(t, s, &settledGate{st: st, tok: l.Token()}, l.Token())
				} else {
					runClaim(t, s)
				}
				first, _ := rec.first(t, name)
				// Attempt 2, or later when a starved worker's own lock went
				// stale (LockTimeout is 1 s) before the handler started and
				// its next claim took the occurrence again (CI, a thread at
				// 5 % of a core, saw attempt 3): the attempts in between
				// must then be in the ledger, none lost.
				if !first.ScheduledFor.Equal(due) || first.Attempt < 2 {
					t.Fatalf("first run after the crash: occurrence %s attempt %d, want the interrupted %s as attempt 2",
						first.ScheduledFor, first.Attempt, due)
				}
				if first.Attempt > 2 {
					runs, err := s.Runs(ctx, name, 50)
					if err != nil {
						t.Fatal(err)
					}
					for a := 2; a < first.Attempt; a++ {
						if !slices.ContainsFunc(runs, func(r sqlease.Run) bool { return r.ScheduledFor.Equal(due) && r.Attempt == a }) {
							t.Fatalf("first run after the crash: the interrupted %s as attempt %d, but attempt %d is not in the ledger: %v",
								due, first.Attempt, a, runs)
						}
					}
					t.Logf("the interrupted occurrence ran as attempt %d (a starved worker's lock went stale)", first.Attempt)
				}
			})
		}
	})
}

// A retry deferred until the prior term ends does not hold up a drain: it
// gives its claim back at once (nothing was started), and the occurrence is
// left for the next owner with its attempt count.
func TestDeferredRetryDoesNotHoldUpDrain(t *testing.T) {
	ctx := context.Background()
	st := dbtest.SQLite(t)
	j := created(t, st, sqlease.Job{Name: "interrupted", Schedule: sqlease.Schedule{Every: time.Hour}})
	_, rec := interruptThenDrain(t, st, "lead", "interrupted", j.ID)
	got, err := st.Job(ctx, "interrupted")
	if err != nil {
		t.Fatal(err)
	}
	if got.LockedBy != "" || got.Attempt != 1 || rec.count() != 0 {
		t.Fatalf("after the drain: locked by %q, attempt %d, %d runs; want unlocked, attempt 1, none", got.LockedBy, got.Attempt, rec.count())
	}
}

// A leader whose dispatch loop is stuck (a refresh waiting on a lock held
// by someone else) says so through Dispatch — readiness answers 503
// dispatch_stuck — and is running again once the statement returns.
func TestStuckDispatchLoopIsVisible(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		s := newSched(t, scheduler.Config{Store: st, RefreshInterval: 50 * time.Millisecond, DispatchFailureLimit: time.Minute})
		e := leadOnce(t, st, s, "a", make(chan error, 1))
		dbtest.WaitFor(t, 10*time.Second, "leadership", e.IsLeader)
		dbtest.WaitFor(t, 5*time.Second, "dispatch", func() bool { return s.Dispatch().Phase == scheduler.PhaseRunning })
		tx, err := st.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		lock := map[string]string{"postgres": "LOCK TABLE sqlease_jobs IN ACCESS EXCLUSIVE MODE",
			"mysql": "SELECT * FROM sqlease_jobs FOR UPDATE", "sqlite": "UPDATE sqlease_jobs SET paused = paused WHERE 0 = 1"}[st.Dialect().Name]
		if st.Dialect().Name == "mysql" {
			// A write lock on the whole table: the refresh's read waits.
			lock = "LOCK TABLES sqlease_jobs WRITE"
			_ = tx.Rollback()
			conn, err := st.DB().Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.ExecContext(ctx, lock); err != nil {
				t.Fatal(err)
			}
			defer conn.ExecContext(ctx, "UNLOCK TABLES")
			dbtest.WaitFor(t, 10*time.Second, "dispatch stuck", func() bool { return s.Dispatch().Phase == scheduler.PhaseStuck })
			if _, err := conn.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
				t.Fatal(err)
			}
		} else {
			if _, err := tx.ExecContext(ctx, lock); err != nil {
				t.Fatal(err)
			}
			if st.Dialect().Name == "sqlite" {
				// In WAL mode a writer holding the lock does not block the
				// refresh's reads: the loop keeps turning, and says so.
				deadline := time.Now().Add(1500 * time.Millisecond)
				for time.Now().Before(deadline) {
					if p := s.Dispatch().Phase; p != scheduler.PhaseRunning {
						t.Fatalf("dispatch %s while another connection only holds the write lock", p)
					}
					time.Sleep(50 * time.Millisecond)
				}
			} else {
				dbtest.WaitFor(t, 10*time.Second, "dispatch stuck", func() bool { return s.Dispatch().Phase == scheduler.PhaseStuck })
			}
			_ = tx.Rollback()
		}
		dbtest.WaitFor(t, 10*time.Second, "dispatch running again", func() bool { return s.Dispatch().Phase == scheduler.PhaseRunning })
	})
}

// A claim of the leader's own term whose commit it never heard of — the
// connection cut after the database committed it — leaves the job locked
// under the leader's own lease epoch with a run started. The leader is not
// running it, so it takes it again at once (the started attempt marked
// abandoned, the next one run), not after the job's lock_timeout.
func TestLeaderRetakesItsOwnUnheardClaim(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		j := created(t, st, sqlease.Job{Name: "unheard", LockTimeout: time.Hour})
		lease, err := st.Acquire(ctx, "lead", "leader", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		tok := lease.Token()
		// The claim and its start commit; the leader never learns it.
		leaderStarts(t, st, tok, j.ID)

		rec := &recorder{}
		s := newSched(t, scheduler.Config{Store: st, Holder: "leader", Handler: rec.handle})
		gate := &settledGate{st: st, tok: tok, settled: time.Now()}
		leadTerm(t, s, gate, tok)

		dbtest.WaitFor(t, 10*time.Second, "the job to run (its lock_timeout is an hour)", func() bool { return rec.count() == 1 })
		time.Sleep(300 * time.Millisecond) // a second run would come now
		runs := rec.snapshot()
		if len(runs) != 1 || runs[0].Attempt != 2 {
			t.Fatalf("runs %+v, want one, attempt 2", runs)
		}
		ledger, err := st.Runs(ctx, "unheard", 10)
		if err != nil {
			t.Fatal(err)
		}
		outcomes := map[int]sqlease.Outcome{}
		for _, r := range ledger {
			outcomes[r.Attempt] = r.Outcome
		}
		if outcomes[1] != sqlease.OutcomeAbandoned || outcomes[2] != sqlease.OutcomeSucceeded {
			t.Fatalf("ledger %v, want attempt 1 abandoned, 2 succeeded", outcomes)
		}
	})
}

// An interrupted occurrence whose retry was claimed and given back
// without starting (here: a deferred retry cut short by a drain; a start
// that fails takes the same path) is still retried by the next owner, even
// though later occurrences fell due and the next claim is no takeover of a
// stale lock. Before, the missed-runs policy (run_once) moved on to the
// latest occurrence: the accepted one was lost (the fault suite's
// terminate-backends-during-rebuild trial found it on PostgreSQL). And a
// next leader whose earlier terms may still act waits for them, as for a
// takeover: the interrupted attempt's sender may be alive.
func TestGivenBackInterruptedOccurrenceRetried(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		for _, next := range []string{"claim", "leader"} {
			t.Run(next, func(t *testing.T) { givenBack(t, newStore, next) })
		}
	})
}

func givenBack(t *testing.T, newStore func(*testing.T) *sqlstore.Store, next string) {
	ctx := context.Background()
	st := newStore(t)
	admin := newSched(t, scheduler.Config{Store: st, Holder: "admin"})
	for _, other := range []string{"every-leader", "every-claim", "given-back"} { // the dialect's database is shared
		if err := admin.Delete(ctx, other); err != nil && !errors.Is(err, sqlease.ErrNoJob) {
			t.Fatal(err)
		}
	}
	j, _, err := admin.Create(ctx, sqlease.Job{Name: "given-back", Schedule: sqlease.Schedule{Every: 200 * time.Millisecond},
		MissedRuns: sqlease.RunOnce, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lease := "lead-given-back-" + next
	due, _ := interruptThenDrain(t, st, lease, "given-back", j.ID)
	got, err := st.Job(ctx, "given-back")
	if err != nil || got.LockedBy != "" || got.Attempt != 1 || !got.NextRunAt.Equal(due) {
		t.Fatalf("after the drain: %+v %v; want unlocked at %s, attempt 1", got, err, due)
	}
	time.Sleep(500 * time.Millisecond) // later occurrences fall due

	rec := &recorder{}
	var settled time.Time
	if next == "claim" {
		runClaim(t, newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: rec.handle}))
	} else {
		l, err := st.Acquire(ctx, lease, "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		settled = time.Now().Add(800 * time.Millisecond)
		leadTerm(t, newSched(t, scheduler.Config{Store: st, Handler: rec.handle}), &settledGate{st: st, tok: l.Token(), settled: settled}, l.Token())
	}
	first, started := rec.first(t, "given-back")
	if !first.ScheduledFor.Equal(due) || first.Attempt != 2 {
		t.Fatalf("first run after the claim was given back: occurrence %s attempt %d, want the interrupted %s as attempt 2",
			first.ScheduledFor, first.Attempt, due)
	}
	if started.Before(settled) {
		t.Fatalf("the interrupted occurrence was retried %s before the earlier terms' holders could no longer act", settled.Sub(started))
	}
}

// lateGate is the gate of a live term that opens only at opensAt, as an
// advisory term's whose acquire was answered late opens at its first renew;
// it records resignations.
type lateGate struct {
	settledGate
	opensAt time.Time
	mu      sync.Mutex
	resigns []string
}

func (g *lateGate) Ensure(tok sqlease.Token) error {
	if time.Now().Before(g.opensAt) {
		return fmt.Errorf("token %s: %w", tok, sqlease.ErrNotLeader)
	}
	return g.settledGate.Ensure(tok)
}

func (g *lateGate) Fenced(ctx context.Context, tok sqlease.Token, fn func(*sql.Tx) error) error {
	if err := g.Ensure(tok); err != nil {
		return err
	}
	return g.settledGate.Fenced(ctx, tok, fn)
}

func (g *lateGate) Resign(tok sqlease.Token, reason string) {
	g.mu.Lock()
	g.resigns = append(g.resigns, reason)
	g.mu.Unlock()
}

// A term that begins with its gate closed is waited for, not resigned: the
// leader dispatches once the gate opens. Resigning it cost a second
// failover, and under load (every acquire answered late) could hand the
// lease round without anyone dispatching.
func TestLeaderWaitsForAGateClosedAtTheTermsStart(t *testing.T) {
	ctx := context.Background()
	st := dbtest.SQLite(t)
	rec := &recorder{}
	s := newSched(t, scheduler.Config{Store: st, Handler: rec.handle})
	if _, _, err := s.Create(ctx, sqlease.Job{Name: "due"}); err != nil {
		t.Fatal(err)
	}
	l, err := st.Acquire(ctx, "lead", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	const closedFor = 500 * time.Millisecond
	began := time.Now()
	gate := &lateGate{settledGate: settledGate{st: st, tok: l.Token()}, opensAt: began.Add(closedFor)}
	leadTerm(t, s, gate, l.Token())
	dbtest.WaitFor(t, 10*time.Second, "the due job to run once the gate opens", func() bool { return rec.count() == 1 })
	if at := rec.at[0]; at.Before(gate.opensAt) {
		t.Errorf("ran %s after the term began, before its gate opened (%s)", at.Sub(began), closedFor)
	}
	gate.mu.Lock()
	defer gate.mu.Unlock()
	if len(gate.resigns) > 0 {
		t.Errorf("the term was resigned: %q", gate.resigns)
	}
}
