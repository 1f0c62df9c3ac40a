package scheduler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// trustGate trusts one worker lease term.
type trustGate struct{ tok sqlease.Token }

func (g trustGate) Ensure(tok sqlease.Token) error {
	if tok != g.tok {
		return sqlease.ErrNotLeader
	}
	return nil
}

// workUnderLease runs s in claim mode under a worker lease of holder, as
// the daemon does, until the test ends.
func workUnderLease(t *testing.T, s *scheduler.Scheduler, st *sqlstore.Store, holder string) {
	t.Helper()
	ctx := context.Background()
	l, err := st.Acquire(ctx, sqlstore.WorkerLeasePrefix+holder, holder, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Work(wctx, l.Token(), trustGate{l.Token()}) }()
	t.Cleanup(func() { cancel(); <-done })
}

// A claim whose answer was lost (the database ended its session after it
// committed) locked a job under the worker's live lease that no run of the
// worker holds. The worker gives it back before its next claim, and the
// job runs then — not after its lock_timeout (an hour here), which is what
// a fault run on MariaDB found: an accepted job that never ran.
func TestClaimWhoseAnswerWasLostIsGivenBack(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		rec := &recorder{}
		s := newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: rec.handle})
		if _, _, err := s.Create(ctx, sqlease.Job{Name: "once", LockTimeout: time.Hour}); err != nil {
			t.Fatal(err)
		}
		var lost atomic.Int32
		undo := scheduler.SetLoseClaimAnswer(func(claimed int) bool { return claimed > 0 && lost.Add(1) == 1 })
		t.Cleanup(undo) // after the worker stops (cleanups run last first)
		workUnderLease(t, s, st, "w")

		dbtest.WaitFor(t, 10*time.Second, "the job whose claim's answer was lost to run", func() bool { return rec.count() == 1 })
		if lost.Load() == 0 {
			t.Fatal("no claim's answer was lost: the test tested nothing")
		}
		dbtest.WaitFor(t, 5*time.Second, "its finish", func() bool {
			j, err := st.Job(ctx, "once")
			return err == nil && j.LockedBy == "" && j.NextRunAt.IsZero()
		})
		runs, err := st.Runs(ctx, "once", 10)
		if err != nil {
			t.Fatal(err)
		}
		// The lost claim may have started attempt 1 (a claim that starts
		// one-off jobs): it is closed as abandoned, and the next attempt ran.
		var succeeded int
		for _, r := range runs {
			switch r.Outcome {
			case sqlease.OutcomeSucceeded:
				succeeded++
			case sqlease.OutcomeAbandoned:
			default:
				t.Errorf("run %s attempt %d: outcome %s", r.IdempotencyKey(), r.Attempt, r.Outcome)
			}
		}
		if succeeded != 1 || rec.count() != 1 {
			t.Errorf("%d succeeded runs, %d handler calls, want 1 each: %+v", succeeded, rec.count(), runs)
		}
	})
}

// A claim that locked a row it cannot decode (CorruptRow) committed, and
// reports the row (sqlstore.CorruptClaims), but is not a lost answer: the
// bad row is set aside for a while, not given back to be claimed again at
// every poll.
func TestClaimOfACorruptRowIsNotGivenBack(t *testing.T) {
	ctx := context.Background()
	st := dbtest.SQLite(t)
	s := newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: (&recorder{}).handle})
	if _, _, err := s.Create(ctx, sqlease.Job{Name: "bad", LockTimeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx, `UPDATE sqlease_jobs SET schedule = 'not json' WHERE name = 'bad'`); err != nil {
		t.Fatal(err)
	}
	workUnderLease(t, s, st, "w")
	lockEpoch := func() (e int64) {
		if err := st.DB().QueryRowContext(ctx, `SELECT lock_epoch FROM sqlease_jobs WHERE name = 'bad'`).Scan(&e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	dbtest.WaitFor(t, 5*time.Second, "the bad row's claim", func() bool { return lockEpoch() > 0 })
	time.Sleep(300 * time.Millisecond) // 15 polls
	if e := lockEpoch(); e != 1 {
		t.Errorf("the bad row was claimed %d times in 300 ms: given back after each failed claim", e)
	}
}
