package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// dispatch starts a dispatcher for s on st until the test ends: claim
// mode, or a leader of a lease it acquires.
func dispatch(t *testing.T, st *sqlstore.Store, s *scheduler.Scheduler, lead bool) {
	t.Helper()
	if !lead {
		runClaim(t, s)
		return
	}
	l, err := st.Acquire(context.Background(), "lead", "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	leadTerm(t, s, &settledGate{st: st, tok: l.Token()}, l.Token())
}

// overlapLedger reads job's ledger oldest first and fails on an occurrence
// recorded twice.
func overlapLedger(t *testing.T, st *sqlstore.Store, job string) []sqlease.Run {
	t.Helper()
	runs, err := st.Runs(context.Background(), job, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[time.Time]bool{}
	out := make([]sqlease.Run, len(runs))
	for i, r := range runs {
		if seen[r.ScheduledFor.UTC()] {
			t.Fatalf("occurrence %v recorded twice", r.ScheduledFor)
		}
		seen[r.ScheduledFor.UTC()] = true
		out[len(runs)-1-i] = r
	}
	return out
}

// concurrency counts handlers running at once and fails on two.
type concurrency struct {
	t       *testing.T
	running atomic.Int32
}

func (c *concurrency) enter() {
	if c.running.Add(1) > 1 {
		c.t.Errorf("two occurrences of one job ran at once")
	}
}

func (c *concurrency) exit() { c.running.Add(-1) }

// TestOverlapSkip: with overlap skip, the occurrences that fell due while a
// run ran are recorded as skipped (each once, none handed to the handler)
// when it is done, and the job goes on with the first occurrence still to
// come, on time. In claim mode on every dialect, and under a leader.
func TestOverlapSkip(t *testing.T) {
	run := func(t *testing.T, st *sqlstore.Store, lead bool) {
		ctx := context.Background()
		cc := &concurrency{t: t}
		var mu sync.Mutex
		handled := map[time.Time]bool{}
		var first atomic.Bool
		first.Store(true)
		var slowEnd atomic.Value // time.Time: when the slow run returned
		s := newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: func(ctx context.Context, r sqlease.Run) error {
			cc.enter()
			defer cc.exit()
			mu.Lock()
			handled[r.ScheduledFor.UTC()] = true
			mu.Unlock()
			if first.CompareAndSwap(true, false) {
				time.Sleep(1200 * time.Millisecond) // about six occurrences fall due meanwhile
				slowEnd.Store(time.Now())
			}
			return nil
		}})
		if _, _, err := s.Create(ctx, sqlease.Job{Name: "tick", Schedule: sqlease.Schedule{Every: 200 * time.Millisecond, Overlap: sqlease.OverlapSkip},
			MissedRuns: sqlease.RunAll}); err != nil {
			t.Fatal(err)
		}
		dispatch(t, st, s, lead)
		waitFor(t, 15*time.Second, "two runs after the skipped ones", func() bool {
			n := 0
			for _, r := range overlapLedger(t, st, "tick") {
				if r.Outcome == sqlease.OutcomeSucceeded {
					n++
				}
			}
			return n >= 3
		})
		s.Drain(ctx)
		ledger := overlapLedger(t, st, "tick")
		if ledger[0].Outcome != sqlease.OutcomeSucceeded {
			t.Fatalf("first occurrence %+v", ledger[0])
		}
		skipped := 0
		for i, r := range ledger[1:] {
			if r.Outcome != sqlease.OutcomeSkipped {
				// Occurrences after the skipped ones run, none late by more
				// than the run of the first (no second batch of skips).
				if skipped == 0 || r.Outcome != sqlease.OutcomeSucceeded && r.Outcome != sqlease.OutcomeRunning {
					t.Fatalf("ledger[%d] = %+v after %d skipped", i+1, r, skipped)
				}
				continue
			}
			if skipped != i {
				t.Fatalf("a skipped occurrence after one that ran: %+v", ledger)
			}
			skipped++
			if r.Error != sqlease.OverlapSkippedError || r.FinishedAt.IsZero() || r.Attempt != 1 {
				t.Fatalf("skipped run %+v", r)
			}
			if handled[r.ScheduledFor.UTC()] {
				t.Fatalf("occurrence %v was skipped and run", r.ScheduledFor)
			}
			// Consecutive: every one that fell due is in the ledger.
			if want := ledger[i].ScheduledFor.Add(200 * time.Millisecond); !r.ScheduledFor.Equal(want) {
				t.Fatalf("skipped %v after %v: an occurrence is missing", r.ScheduledFor, ledger[i].ScheduledFor)
			}
		}
		if skipped < 3 {
			t.Fatalf("%d occurrences skipped while a 1.2 s run of a 200 ms job ran, want at least 3: %+v", skipped, ledger)
		}
		// The run after the skips is an occurrence that was still to come
		// when the slow run was done (on the database clock, which the
		// test compares with its own through the first occurrence).
		if next := ledger[1+skipped]; next.ScheduledFor.Before(ledger[1+skipped-1].ScheduledFor) {
			t.Fatalf("ran %v after skipping until %v", next.ScheduledFor, ledger[skipped].ScheduledFor)
		}
	}
	dialects(t, func(t *testing.T, newStore func(*testing.T) *sqlstore.Store) { run(t, newStore(t), false) })
	t.Run("leader", func(t *testing.T) { run(t, sqliteStore(t), true) })
}

// TestOverlapCancelRunning: with overlap cancel_running, a run still going
// when the next occurrence falls due has its context cancelled, ends
// cancelled (not retried), and the next occurrence runs. In claim mode on
// every dialect, and under a leader.
func TestOverlapCancelRunning(t *testing.T) {
	run := func(t *testing.T, st *sqlstore.Store, lead bool) {
		ctx := context.Background()
		cc := &concurrency{t: t}
		var first atomic.Bool
		first.Store(true)
		cause := make(chan error, 1)
		s := newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: func(ctx context.Context, r sqlease.Run) error {
			cc.enter()
			defer cc.exit()
			if first.CompareAndSwap(true, false) {
				select {
				case <-ctx.Done():
					cause <- context.Cause(ctx)
					return ctx.Err()
				case <-time.After(20 * time.Second):
					return errors.New("not cancelled")
				}
			}
			return nil
		}})
		if _, _, err := s.Create(ctx, sqlease.Job{Name: "tick", Schedule: sqlease.Schedule{Every: 500 * time.Millisecond, Overlap: sqlease.OverlapCancelRunning},
			Retry: sqlease.Retry{MaxAttempts: 3}}); err != nil {
			t.Fatal(err)
		}
		dispatch(t, st, s, lead)
		select {
		case err := <-cause:
			if err == nil || err.Error() != sqlease.OverlapCancelledError {
				t.Fatalf("the run was cancelled with %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("the running occurrence was not cancelled when the next fell due")
		}
		waitFor(t, 15*time.Second, "the next occurrence to run", func() bool {
			l := overlapLedger(t, st, "tick")
			return len(l) >= 2 && l[1].Outcome == sqlease.OutcomeSucceeded
		})
		s.Drain(ctx)
		l := overlapLedger(t, st, "tick")
		if l[0].Outcome != sqlease.OutcomeCancelled || l[0].Error != sqlease.OverlapCancelledError || l[0].Attempt != 1 {
			t.Fatalf("the cancelled run: %+v", l[0])
		}
		if want := l[0].ScheduledFor.Add(500 * time.Millisecond); !l[1].ScheduledFor.Equal(want) || l[1].Attempt != 1 {
			t.Fatalf("after the cancelled %v ran %+v, want the next occurrence %v", l[0].ScheduledFor, l[1], want)
		}
	}
	dialects(t, func(t *testing.T, newStore func(*testing.T) *sqlstore.Store) { run(t, newStore(t), false) })
	t.Run("leader", func(t *testing.T) { run(t, sqliteStore(t), true) })
}

// TestOverlapValidation: the policies accepted, the default stored as
// empty (a job created with "wait" is the job created without it), and
// clear errors for the rest, allow included.
func TestOverlapValidation(t *testing.T) {
	ctx := context.Background()
	s := newSched(t, scheduler.Config{Store: sqliteStore(t)})
	every := sqlease.Schedule{Every: time.Minute}
	a, _, err := s.Create(ctx, sqlease.Job{Name: "a", Schedule: every})
	if err != nil {
		t.Fatal(err)
	}
	w := every
	w.Overlap = sqlease.OverlapWait
	b, created, err := s.Create(ctx, sqlease.Job{Name: "a", Schedule: w})
	if err != nil || created || b.ID != a.ID || b.Schedule.Overlap != "" {
		t.Fatalf("create with overlap wait: %+v created=%v err=%v", b, created, err)
	}
	for _, o := range []sqlease.Overlap{sqlease.OverlapSkip, sqlease.OverlapCancelRunning} {
		sc := every
		sc.Overlap = o
		j, _, err := s.Create(ctx, sqlease.Job{Name: "j-" + string(o[:4]), Schedule: sc})
		if err != nil || j.Schedule.Overlap != o {
			t.Fatalf("overlap %s: %+v %v", o, j, err)
		}
		got, err := s.Job(ctx, j.Name)
		if err != nil || got.Schedule.Overlap != o {
			t.Fatalf("overlap %s read back: %+v %v", o, got, err)
		}
	}
	for _, c := range []struct {
		s    sqlease.Schedule
		want string
	}{
		{sqlease.Schedule{Overlap: sqlease.OverlapAllow}, `overlap "allow" needs a repeating schedule`},
		{sqlease.Schedule{Every: time.Minute, Overlap: "parallel"}, `overlap must be wait, allow, skip or cancel_running, got "parallel"`},
		{sqlease.Schedule{Overlap: sqlease.OverlapSkip}, `overlap "skip" needs a repeating schedule`},
	} {
		_, _, err := s.Create(ctx, sqlease.Job{Name: "bad", Schedule: c.s})
		if !errors.Is(err, sqlease.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("overlap %q: %v, want %q", c.s.Overlap, err, c.want)
		}
	}
	if _, err := s.Job(ctx, "bad"); !errors.Is(err, sqlease.ErrNoJob) {
		t.Fatalf("a refused job was stored: %v", err)
	}
}
