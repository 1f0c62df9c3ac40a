package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// On PostgreSQL a claim-mode worker at a trickle claims the jobs falling
// due in the next few milliseconds with the ones due now, and starts each
// at its own due time: never before it, the run's started_at never later
// than the action's start nor before its occurrence, each job once.
func TestWorkerClaimsAhead(t *testing.T) {
	st := dbtest.Postgres(t)
	triedUntilAhead(t, "the worker", func(prefix string) (int, int) { return workerClaimsAhead(t, st, prefix) })
}

// workerClaimsAhead runs 60 jobs named prefix… due 1 ms apart under a
// claim-mode worker, checks each run, and returns how many were claimed
// ahead and how many started over 5 ms after their due time.
func workerClaimsAhead(t *testing.T, st *sqlstore.Store, prefix string) (ahead, late int) {
	t.Helper()
	base := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
	const n = 60
	jobs := map[string]time.Time{}
	for i := range n {
		jobs[fmt.Sprintf("%sj%02d", prefix, i)] = base.Add(time.Duration(i) * time.Millisecond)
	}
	createDue(t, st, jobs)
	rec := &aheadRecorder{}
	s := newSched(t, scheduler.Config{Store: st, Holder: "worker", Handler: rec.handle, PollInterval: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	dbtest.WaitFor(t, 20*time.Second, "every job to run", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.starts) >= n
	})
	for name, due := range jobs {
		start := rec.once(t, name)
		if startLate(t, name, start, due) {
			late++
		}
		var runs []sqlease.Run
		dbtest.WaitFor(t, 10*time.Second, "the run of "+name+" to finish", func() bool {
			var err error
			runs, err = st.Runs(t.Context(), name, 10)
			return err == nil && len(runs) == 1 && runs[0].Outcome == sqlease.OutcomeSucceeded
		})
		if runClaimedAhead(t, name, runs[0], start) {
			ahead++
		}
	}
	return ahead, late
}

// A job a worker claimed ahead starts only while the worker's term lasts
// and its gate is open: a term that ends first leaves its attempt to be
// reclaimed (orphaned with the worker lease), and another worker runs the
// occurrence as attempt 2, once; a gate closed at its due time holds it
// until the gate opens again under the same term.
func TestWorkerClaimedAheadStartsOnlyInTerm(t *testing.T) {
	inTermCases(t, workerAheadScenario)
}

// workTerm runs s.Work under a fresh worker lease of holder on st until
// the returned stop is called (the term ends); stop waits for Work to
// return.
func workTerm(t *testing.T, st *sqlstore.Store, s *scheduler.Scheduler, holder string) (*aheadGate, func()) {
	t.Helper()
	l, err := st.Acquire(t.Context(), sqlstore.WorkerLeasePrefix+holder, holder, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	g := &aheadGate{st: st, tok: l.Token()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Work(ctx, g.tok, g); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Work: %v", err)
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return g, stop
}

// workerAheadScenario is one try of TestWorkerClaimedAheadStartsOnlyInTerm
// on a fresh database; false: not reached (the machine ran first's handler
// only after second had started), try again.
func workerAheadScenario(t *testing.T, end bool) bool {
	// The gate closes in first's handler, before second falls due 300 ms
	// later: a 400 ms window claims both at first's due time.
	defer scheduler.SetWorkerClaimAhead(400 * time.Millisecond)()
	st := dbtest.Postgres(t)
	base := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
	secondDue := base.Add(300 * time.Millisecond)
	createDue(t, st, map[string]time.Time{"first": base, "second": secondDue})
	rec := &aheadRecorder{}
	s := newSched(t, scheduler.Config{Store: st, Holder: "w1", Handler: rec.handle, PollInterval: time.Second})
	gate, stop := workTerm(t, st, s, "w1")
	var closedAt time.Time
	var closing sync.WaitGroup
	closing.Add(1)
	rec.mu.Lock()
	rec.on = func(r sqlease.Run) {
		if r.Job != "first" || r.Holder != "w1" {
			return
		}
		gate.setClosed(true)
		closedAt = time.Now()
		if end {
			go stop() // Work waits for this run to return
		}
		closing.Done()
	}
	rec.mu.Unlock()
	closing.Wait()
	if !closedAt.Before(secondDue) {
		t.Logf("first's handler closed the gate %s after second fell due: the machine was too slow for the scenario", closedAt.Sub(secondDue))
		stop()
		return false
	}
	time.Sleep(time.Until(secondDue.Add(300 * time.Millisecond)))
	if got := rec.of("second"); len(got) != 0 {
		t.Fatalf("job second started with its gate closed (attempt %d)", got[0].run.Attempt)
	}
	runs, err := st.Runs(t.Context(), "second", 10)
	if err != nil || len(runs) != 1 || runs[0].Outcome != sqlease.OutcomeRunning || runs[0].Holder != "w1" || !runs[0].StartedAt.Equal(secondDue) {
		t.Fatalf("job second was not claimed ahead with first, its run started at its occurrence (its runs: %+v, %v)", runs, err)
	}
	if !end {
		gate.setClosed(false)
		dbtest.WaitFor(t, 10*time.Second, "second to start once the gate opens", func() bool { return len(rec.of("second")) > 0 })
		stop()
		got := rec.of("second")
		if len(got) != 1 || got[0].run.Holder != "w1" || got[0].run.Attempt != 1 {
			t.Fatalf("job second's starts: %+v; want attempt 1 once, by w1", got)
		}
		return true
	}
	stop()
	// The term's lease is given up (as it expires): w1's claim of second
	// is orphaned, for any worker to take at once.
	if err := st.Release(t.Context(), gate.tok); err != nil {
		t.Fatal(err)
	}
	s2 := newSched(t, scheduler.Config{Store: st, Holder: "w2", Handler: rec.handle, PollInterval: 50 * time.Millisecond})
	_, stop2 := workTerm(t, st, s2, "w2")
	dbtest.WaitFor(t, 10*time.Second, "another worker to run second", func() bool { return len(rec.of("second")) > 0 })
	time.Sleep(100 * time.Millisecond) // a second start would show by now
	stop2()
	got := rec.of("second")
	if len(got) != 1 || got[0].run.Holder != "w2" || got[0].run.Attempt != 2 {
		t.Fatalf("job second's starts: %+v; want attempt 2 once, by w2", got)
	}
	runs, err = st.Runs(t.Context(), "second", 10)
	if err != nil || len(runs) != 2 || runs[1].Attempt != 1 || runs[1].Outcome != sqlease.OutcomeAbandoned {
		t.Fatalf("job second's runs: %+v, %v; want attempt 1 abandoned", runs, err)
	}
	return true
}

// A claim-mode worker on PostgreSQL learns when the next job falls due
// from its claim itself (the claim ahead's answer), instead of asking
// NextDue after it: it wakes for each job at its due time, not at its next
// poll (10 s here).
func TestWorkerWakesWhenItsClaimSaysTheNextIsDue(t *testing.T) {
	st := dbtest.Postgres(t)
	base := time.Now().Add(time.Second).Truncate(time.Millisecond)
	jobs := map[string]time.Time{"a": base, "b": base.Add(400 * time.Millisecond), "c": base.Add(800 * time.Millisecond)}
	createDue(t, st, jobs)
	rec := &aheadRecorder{}
	s := newSched(t, scheduler.Config{Store: st, Holder: "worker", Handler: rec.handle, PollInterval: 10 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	dbtest.WaitFor(t, 5*time.Second, "every job to run", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.starts) >= len(jobs)
	})
	for name, due := range jobs {
		starts := rec.of(name)
		if len(starts) != 1 {
			t.Fatalf("job %s started %d times", name, len(starts))
		}
		// Generous for a loaded machine; the poll is 10 s.
		if late := starts[0].at.Sub(due); late < 0 || late > time.Second {
			t.Errorf("job %s started %s after it was due", name, late)
		}
	}
}
