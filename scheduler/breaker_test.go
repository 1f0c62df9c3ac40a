package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// breakerObserver counts the occurrences a breaker skipped.
type breakerObserver struct{ skipped atomic.Int64 }

func (*breakerObserver) RunFinished(string, sqlease.Outcome, time.Duration) {}
func (o *breakerObserver) BreakerSkipped(string)                            { o.skipped.Add(1) }

// breakerLedger checks a breaker job's ledger: each occurrence once, every
// skipped one with the breaker's error and never handed to the handler,
// and returns the outcomes oldest first.
func breakerLedger(t *testing.T, st *sqlstore.Store, job string, handled map[time.Time]bool) []sqlease.Outcome {
	t.Helper()
	runs := overlapLedger(t, st, job)
	out := make([]sqlease.Outcome, len(runs))
	for i, r := range runs {
		if r.Outcome == sqlease.OutcomeSkipped {
			if r.Error != sqlease.BreakerOpenError || r.FinishedAt.IsZero() {
				t.Fatalf("skipped run %+v", r)
			}
			if handled[r.ScheduledFor.UTC()] {
				t.Fatalf("occurrence %v was skipped and run", r.ScheduledFor)
			}
		}
		out[i] = r.Outcome
	}
	return out
}

// downstream is a handler that records each occurrence it is given (UTC)
// on handled and fails while failing is set (as it is at first).
func downstream(handled chan<- time.Time) (handler scheduler.Handler, failing *atomic.Bool) {
	failing = &atomic.Bool{}
	failing.Store(true)
	return func(ctx context.Context, r sqlease.Run) error {
		handled <- r.ScheduledFor.UTC()
		if failing.Load() {
			return errors.New("downstream is down")
		}
		return nil
	}, failing
}

// jobOf returns a func reading job name through s, failing t on an error.
func jobOf(t *testing.T, s *scheduler.Scheduler, name string) func() sqlease.Job {
	return func() sqlease.Job {
		j, err := s.Job(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
}

// TestBreaker: after breaker.failures failed occurrences in a row the
// breaker opens and the occurrences due are recorded as skipped ("breaker
// open") without running; once the cool-down has passed one probe runs: its
// failure opens the breaker again (a later opened_at), its success closes
// it, and the job runs as before. In claim mode on every dialect, and under
// a leader.
func TestBreaker(t *testing.T) {
	run := func(t *testing.T, st *sqlstore.Store, lead bool) {
		ctx := context.Background()
		handled := make(chan time.Time, 10_000)
		handler, failing := downstream(handled)
		obs := &breakerObserver{}
		s := newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: handler, Observer: obs})
		if _, _, err := s.Create(ctx, sqlease.Job{Name: "flaky", Schedule: sqlease.Schedule{Every: 100 * time.Millisecond},
			Retry: sqlease.Retry{MaxAttempts: 1}, Breaker: sqlease.Breaker{Failures: 2, CoolDown: time.Second}}); err != nil {
			t.Fatal(err)
		}
		dispatch(t, st, s, lead)
		job := jobOf(t, s, "flaky")
		dbtest.WaitFor(t, 10*time.Second, "the breaker to open", func() bool { return !job().BreakerOpenedAt.IsZero() })
		opened := job()
		if opened.BreakerFailures != 2 || !opened.BreakerChangedAt.Equal(opened.BreakerOpenedAt) {
			t.Fatalf("opened: failures %d, opened %v changed %v", opened.BreakerFailures, opened.BreakerOpenedAt, opened.BreakerChangedAt)
		}
		// The probe after the cool-down fails too: open again, later.
		dbtest.WaitFor(t, 10*time.Second, "the probe to reopen it", func() bool { return job().BreakerOpenedAt.After(opened.BreakerOpenedAt) })
		reopened := job()
		if d := reopened.BreakerOpenedAt.Sub(opened.BreakerOpenedAt); d < time.Second {
			t.Fatalf("reopened %s after opening, before the cool-down of 1s had passed", d)
		}
		if reopened.BreakerFailures != 3 {
			t.Fatalf("after the failed probe: %d consecutive failures, want 3", reopened.BreakerFailures)
		}
		failing.Store(false)
		dbtest.WaitFor(t, 10*time.Second, "the probe to close it", func() bool {
			j := job()
			return j.BreakerOpenedAt.IsZero() && j.BreakerChangedAt.After(reopened.BreakerOpenedAt)
		})
		dbtest.WaitFor(t, 10*time.Second, "two more runs", func() bool {
			out := breakerLedger(t, st, "flaky", nil)
			return len(out) > 2 && out[len(out)-1] == sqlease.OutcomeSucceeded && out[len(out)-2] == sqlease.OutcomeSucceeded
		})
		closed := job()
		if closed.BreakerFailures != 0 {
			t.Fatalf("closed with %d failures counted", closed.BreakerFailures)
		}
		if state, _ := closed.BreakerState(time.Now()); state != sqlease.BreakerClosed {
			t.Fatalf("state %q", state)
		}
		s.Drain(ctx)
		got := map[time.Time]bool{}
		for len(handled) > 0 {
			got[<-handled] = true
		}
		out := breakerLedger(t, st, "flaky", got)
		// failed, failed, skipped…, failed (the probe), skipped…,
		// succeeded (the probe), succeeded…
		var word []string
		for _, o := range out {
			if w := string(o); len(word) == 0 || word[len(word)-1] != w || o == sqlease.OutcomeFailed {
				word = append(word, w)
			}
		}
		want := "failed failed skipped failed skipped succeeded"
		if strings.Join(word, " ") != want {
			t.Fatalf("ledger %v, want the shape %q", out, want)
		}
		var skipped int64
		for _, o := range out {
			if o == sqlease.OutcomeSkipped {
				skipped++
			}
		}
		if n := obs.skipped.Load(); n != skipped {
			t.Fatalf("observer counted %d skipped, the ledger %d", n, skipped)
		}
	}
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) { run(t, newStore(t), false) })
	t.Run("leader", func(t *testing.T) { run(t, dbtest.SQLite(t), true) })
}

// TestBreakerValidation: a breaker needs failures and a repeating
// schedule; its cool-down defaults and is bounded; it is part of the job's
// content, and a job without one hashes as before.
func TestBreakerValidation(t *testing.T) {
	every := sqlease.Schedule{Every: time.Minute}
	for _, b := range []struct {
		job  sqlease.Job
		want string
	}{
		{sqlease.Job{Name: "x", Schedule: every, Breaker: sqlease.Breaker{CoolDown: time.Minute}}, "breaker.failures"},
		{sqlease.Job{Name: "x", Schedule: every, Breaker: sqlease.Breaker{Failures: -1}}, "breaker.failures"},
		{sqlease.Job{Name: "x", Schedule: every, Breaker: sqlease.Breaker{Failures: 1001}}, "breaker.failures"},
		{sqlease.Job{Name: "x", Schedule: every, Breaker: sqlease.Breaker{Failures: 3, CoolDown: time.Millisecond}}, "breaker.cool_down"},
		{sqlease.Job{Name: "x", Breaker: sqlease.Breaker{Failures: 3}}, "repeating schedule"},
	} {
		if _, _, err := scheduler.Prepare(b.job, nil); !errors.Is(err, sqlease.ErrInvalidConfig) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: want an error naming %q, got %v", b.job.Breaker, b.want, err)
		}
	}
	j, h1, err := scheduler.Prepare(sqlease.Job{Name: "x", Schedule: every, Breaker: sqlease.Breaker{Failures: 3}}, nil)
	if err != nil || j.Breaker.CoolDown != scheduler.DefaultBreakerCoolDown {
		t.Fatalf("default cool-down: %+v, %v", j.Breaker, err)
	}
	_, h0, _ := scheduler.Prepare(sqlease.Job{Name: "x", Schedule: every}, nil)
	if h0 == h1 {
		t.Fatal("a breaker does not change the job's content hash")
	}
	// The hash of a job without a breaker is the one earlier versions
	// stored (computed by the version before breakers), so that creating
	// it again after an upgrade stays a 200, not a 409.
	if h0 != "e53f119567a9714cca493aaaf6173ccb21859682754c4c0daa8116188065e630" {
		t.Fatalf("hash of a job without a breaker changed: %s", h0)
	}
}

// TestTriggerProbesOpenBreaker: a trigger while the breaker is open runs
// (an operator asked for a run now) as the probe: its success closes the
// breaker; a due regular occurrence in the cool-down is still skipped. In
// claim mode on every dialect, and under a leader.
func TestTriggerProbesOpenBreaker(t *testing.T) {
	run := func(t *testing.T, st *sqlstore.Store, lead bool) {
		ctx := context.Background()
		handled := make(chan time.Time, 100)
		handler, failing := downstream(handled)
		s := newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: handler})
		// Its first occurrence is due now; the next an hour later, and the
		// cool-down is an hour: nothing but a trigger can run it again soon.
		if _, _, err := s.Create(ctx, sqlease.Job{Name: "hourly", Schedule: sqlease.Schedule{Every: time.Hour},
			Retry: sqlease.Retry{MaxAttempts: 1}, Breaker: sqlease.Breaker{Failures: 1, CoolDown: time.Hour}}); err != nil {
			t.Fatal(err)
		}
		dispatch(t, st, s, lead)
		job := jobOf(t, s, "hourly")
		dbtest.WaitFor(t, 10*time.Second, "the breaker to open", func() bool { return !job().BreakerOpenedAt.IsZero() })
		regular := job().NextRunAt
		failing.Store(false)
		if _, err := s.Trigger(ctx, "hourly"); err != nil {
			t.Fatal(err)
		}
		dbtest.WaitFor(t, 10*time.Second, "the triggered probe to close the breaker", func() bool {
			j := job()
			return j.BreakerOpenedAt.IsZero() && j.LockedBy == "" && j.Attempt == 0
		})
		if j := job(); !j.NextRunAt.Equal(regular) || j.BreakerFailures != 0 {
			t.Fatalf("after the probe: next %v (want the regular %v), failures %d", j.NextRunAt, regular, j.BreakerFailures)
		}
		out := breakerLedger(t, st, "hourly", nil)
		if len(out) != 2 || out[0] != sqlease.OutcomeFailed || out[1] != sqlease.OutcomeSucceeded {
			t.Fatalf("ledger %v, want [failed succeeded]", out)
		}
		if n := len(handled); n != 2 {
			t.Fatalf("handler ran %d times, want 2", n)
		}
	}
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) { run(t, newStore(t), false) })
	t.Run("leader", func(t *testing.T) { run(t, dbtest.SQLite(t), true) })
}
