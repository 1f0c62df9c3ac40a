package scheduler_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
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

// ledgerOf reads job's ledger (its latest 10,000 runs), oldest first.
func ledgerOf(t *testing.T, st *sqlstore.Store, job string) []sqlease.Run {
	t.Helper()
	runs, err := st.Runs(context.Background(), job, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(runs) // Runs is newest first
	return runs
}

// overlapLedger reads job's ledger oldest first and fails on an occurrence
// recorded twice.
func overlapLedger(t *testing.T, st *sqlstore.Store, job string) []sqlease.Run {
	t.Helper()
	runs := ledgerOf(t, st, job)
	seen := map[time.Time]bool{}
	for _, r := range runs {
		if seen[r.ScheduledFor.UTC()] {
			t.Fatalf("occurrence %v recorded twice", r.ScheduledFor)
		}
		seen[r.ScheduledFor.UTC()] = true
	}
	return runs
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
		dbtest.WaitFor(t, 15*time.Second, "two runs after the skipped ones", func() bool {
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
		skipped := 0      // the first batch: those due during the slow run
		last := ledger[0] // the last occurrence that ran
		for i, r := range ledger[1:] {
			if r.Outcome != sqlease.OutcomeSkipped {
				// Occurrences after the skipped ones run.
				if skipped == 0 || r.Outcome != sqlease.OutcomeSucceeded && r.Outcome != sqlease.OutcomeRunning {
					t.Fatalf("ledger[%d] = %+v after %d skipped", i+1, r, skipped)
				}
				last = r
				continue
			}
			if skipped != i {
				// A later skip only where the run before it was still
				// going when it fell due: on a starved machine a no-op run
				// can outlast the 200 ms interval (CI). Otherwise nothing
				// ran over it, and it must have run.
				if last.Outcome == sqlease.OutcomeSucceeded && !last.FinishedAt.After(r.ScheduledFor) {
					t.Fatalf("occurrence %v skipped after one that ran and finished at %v, before it fell due: %+v", r.ScheduledFor, last.FinishedAt, ledger)
				}
				t.Logf("occurrence %v skipped: the run of %v was still going (finished %v)", r.ScheduledFor, last.ScheduledFor, last.FinishedAt)
			} else {
				skipped++
			}
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
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) { run(t, newStore(t), false) })
	t.Run("leader", func(t *testing.T) { run(t, dbtest.SQLite(t), true) })
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
		dbtest.WaitFor(t, 15*time.Second, "the next occurrence to run", func() bool {
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
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) { run(t, newStore(t), false) })
	t.Run("leader", func(t *testing.T) { run(t, dbtest.SQLite(t), true) })
}

// TestOverlapValidation: the policies accepted, the default stored as
// empty (a job created with "wait" is the job created without it), and
// clear errors for the rest, allow included.
func TestOverlapValidation(t *testing.T) {
	ctx := context.Background()
	s := newSched(t, scheduler.Config{Store: dbtest.SQLite(t)})
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

// inFlight counts handlers running at once per job and keeps the peak.
type inFlight struct {
	mu        sync.Mutex
	now, peak int
}

func (f *inFlight) enter() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now++
	f.peak = max(f.peak, f.now)
}

func (f *inFlight) exit() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now--
}

func (f *inFlight) max() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peak
}

// allowLedger reads job's ledger and checks that no occurrence succeeded
// twice; it returns the occurrences that succeeded, oldest first.
func allowLedger(t *testing.T, st *sqlstore.Store, job string) []time.Time {
	t.Helper()
	ok := map[time.Time]bool{}
	var out []time.Time
	for _, r := range ledgerOf(t, st, job) {
		if r.Outcome != sqlease.OutcomeSucceeded {
			continue
		}
		at := r.ScheduledFor.UTC()
		if ok[at] {
			t.Fatalf("occurrence %s succeeded twice", at.Format(time.RFC3339Nano))
		}
		ok[at] = true
		out = append(out, at)
	}
	return out
}

// consecutive fails unless the occurrences are every `every` from the first,
// none missing.
func consecutive(t *testing.T, got []time.Time, every time.Duration) {
	t.Helper()
	seen := map[time.Time]bool{}
	first := got[0]
	for _, at := range got {
		seen[at] = true
		if at.Before(first) {
			first = at
		}
	}
	for i := range got {
		if at := first.Add(time.Duration(i) * every); !seen[at] {
			t.Fatalf("occurrence %s is missing among %d that succeeded", at.Format(time.RFC3339Nano), len(got))
		}
	}
}

// TestAllowOverlaps: with overlap allow, a 450 ms job every 100 ms runs
// several occurrences at once — in claim mode on one worker, and across two
// workers with max_concurrent 2 never more than that; under a leader, with
// and without the bound — each exactly once and none missed (run_all), on
// every dialect.
func TestAllowOverlaps(t *testing.T) {
	run := func(t *testing.T, st *sqlstore.Store, job string, workers, bound int, lead bool) {
		ctx := context.Background()
		f := &inFlight{}
		handler := func(ctx context.Context, r sqlease.Run) error {
			if r.Job != job {
				return nil // another subtest's, on the same database
			}
			f.enter()
			defer f.exit()
			select {
			case <-time.After(450 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var scheds []*scheduler.Scheduler
		for i := range workers {
			scheds = append(scheds, newSched(t, scheduler.Config{Store: st, Holder: fmt.Sprintf("w%d", i), Handler: handler}))
		}
		every := 100 * time.Millisecond
		if _, _, err := scheds[0].Create(ctx, sqlease.Job{Name: job, Schedule: sqlease.Schedule{Every: every, Overlap: sqlease.OverlapAllow, MaxConcurrent: bound},
			MissedRuns: sqlease.RunAll}); err != nil {
			t.Fatal(err)
		}
		if lead {
			l, err := st.Acquire(ctx, "lead-"+job, "w0", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			leadTerm(t, scheds[0], &settledGate{st: st, tok: l.Token()}, l.Token())
		} else {
			for _, s := range scheds {
				runClaim(t, s)
			}
		}
		dbtest.WaitFor(t, 30*time.Second, "12 occurrences to succeed", func() bool { return len(allowLedger(t, st, job)) >= 12 })
		for _, s := range scheds {
			s.Drain(ctx)
		}
		got := allowLedger(t, st, job)
		if err := scheds[0].Delete(ctx, job); err != nil {
			t.Fatal(err)
		}
		consecutive(t, got, every)
		peak := f.max()
		switch {
		case bound > 0 && peak > bound:
			t.Fatalf("%d occurrences ran at once, max_concurrent is %d", peak, bound)
		case bound > 0 && peak < bound:
			t.Fatalf("at most %d occurrences ran at once, want %d (max_concurrent) of a 450 ms job every 100 ms", peak, bound)
		case bound == 0 && peak < 3:
			t.Fatalf("at most %d occurrences ran at once, want at least 3 of a 450 ms job every 100 ms", peak)
		}
		t.Logf("%d occurrences succeeded, at most %d at once", len(got), peak)
	}
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		t.Run("one worker", func(t *testing.T) { run(t, newStore(t), "par1", 1, 0, false) })
		t.Run("two workers max 2", func(t *testing.T) { run(t, newStore(t), "par2", 2, 2, false) })
		t.Run("leader", func(t *testing.T) { run(t, newStore(t), "par3", 1, 0, true) })
		t.Run("leader max 2", func(t *testing.T) { run(t, newStore(t), "par4", 1, 2, true) })
	})
}

// TestAllowRetryAndHandover: an allow job's failing occurrence is retried
// with attempt + 1, while the next occurrences run meanwhile; a worker that
// stops mid-run gives its occurrence back (abandoned) and another worker
// runs it with the next attempt and the checkpoint the first saved.
func TestAllowRetryAndHandover(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		var mu sync.Mutex
		attempts := map[time.Time][]int{}
		var first atomic.Value // time.Time: the first occurrence
		started := make(chan struct{})
		var startOnce sync.Once
		a := newSched(t, scheduler.Config{Store: st, Holder: "a", ShutdownTimeout: 50 * time.Millisecond, Handler: func(ctx context.Context, r sqlease.Run) error {
			mu.Lock()
			attempts[r.ScheduledFor.UTC()] = append(attempts[r.ScheduledFor.UTC()], r.Attempt)
			mu.Unlock()
			if first.CompareAndSwap(nil, r.ScheduledFor.UTC()) {
				if err := scheduler.Checkpoint(ctx, map[string]int{"done": 90}); err != nil {
					return err
				}
				startOnce.Do(func() { close(started) })
				<-ctx.Done() // until a stops
				return ctx.Err()
			}
			return nil
		}})
		if _, _, err := a.Create(ctx, sqlease.Job{Name: "hand", Schedule: sqlease.Schedule{Every: 300 * time.Millisecond, Overlap: sqlease.OverlapAllow},
			MissedRuns: sqlease.RunAll, Retry: sqlease.Retry{MaxAttempts: 3, Backoff: 100 * time.Millisecond}}); err != nil {
			t.Fatal(err)
		}
		stopA := runClaim(t, a)
		select {
		case <-started:
		case <-time.After(15 * time.Second):
			t.Fatal("the first occurrence did not start")
		}
		// Later occurrences run while the first hangs.
		dbtest.WaitFor(t, 15*time.Second, "two later occurrences to succeed", func() bool { return len(allowLedger(t, st, "hand")) >= 2 })
		stopA()

		resumed := make(chan json.RawMessage, 1)
		failOnce := map[time.Time]bool{}
		b := newSched(t, scheduler.Config{Store: st, Holder: "b", Handler: func(ctx context.Context, r sqlease.Run) error {
			at := r.ScheduledFor.UTC()
			mu.Lock()
			attempts[at] = append(attempts[at], r.Attempt)
			fail := !failOnce[at] && !at.Equal(first.Load().(time.Time))
			failOnce[at] = true
			mu.Unlock()
			if at.Equal(first.Load().(time.Time)) {
				resumed <- r.Checkpoint
				return nil
			}
			if fail {
				return errors.New("first attempt fails")
			}
			return nil
		}})
		runClaim(t, b)
		select {
		case cp := <-resumed:
			if string(cp) != `{"done":90}` {
				t.Errorf("the handed over occurrence resumed from %s, want the checkpoint a saved", cp)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the occurrence a gave back was not run by b")
		}
		f := first.Load().(time.Time)
		// The first six occurrences succeeded: later ones may succeed
		// before an earlier one's retry (each fails once first), so the
		// count alone is not the condition.
		firstSix := func() bool {
			got := allowLedger(t, st, "hand")
			return len(got) >= 6 && got[5].Equal(got[0].Add(5*300*time.Millisecond))
		}
		for deadline := time.Now().Add(20 * time.Second); !firstSix(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				mu.Lock()
				seen := fmt.Sprint(attempts)
				mu.Unlock()
				t.Fatalf("six occurrences did not succeed within 20 s: succeeded %v; attempts by occurrence %s", allowLedger(t, st, "hand"), seen)
			}
		}
		b.Drain(ctx)
		// Occurrences after the sixth may wait for their retry at the
		// drain: a gap there is theirs to fill.
		got := allowLedger(t, st, "hand")
		consecutive(t, got[:6], 300*time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(attempts[f]) != "[1 2]" {
			t.Errorf("attempts of the handed over occurrence %v, want [1 2]", attempts[f])
		}
		retried := 0
		for at, as := range attempts {
			if !at.Equal(f) && len(as) == 2 && as[0] == 1 && as[1] == 2 {
				retried++
			}
		}
		if retried == 0 {
			t.Errorf("no occurrence b failed was retried with attempt 2: %v", attempts)
		}
		// Retries were inserted after later occurrences' runs: paging
		// through the ledger shows every run once, in the order of one
		// read of it all.
		checkPaging(t, st, "hand", 3)
	})
}

// checkPaging reads job's runs in pages of size (Runs, then RunsBefore
// from the last run of each page) and checks that they are the runs one
// read returns, in its order, each once.
func checkPaging(t *testing.T, st *sqlstore.Store, job string, size int) {
	t.Helper()
	ctx := context.Background()
	all, err := st.Runs(ctx, job, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	key := func(r sqlease.Run) string {
		return fmt.Sprintf("%s#%d", r.ScheduledFor.UTC().Format(time.RFC3339Nano), r.Attempt)
	}
	var paged []string
	page, err := st.Runs(ctx, job, size)
	for len(page) > 0 && err == nil && len(paged) <= len(all) {
		for _, r := range page {
			paged = append(paged, key(r))
		}
		last := page[len(page)-1]
		page, err = st.RunsBefore(ctx, job, last.ScheduledFor, last.Attempt, size)
	}
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range all {
		want = append(want, key(r))
	}
	if fmt.Sprint(paged) != fmt.Sprint(want) {
		t.Errorf("the runs of %s in pages of %d:\n%v\nin one read:\n%v", job, size, paged, want)
	}
}

// TestAllowValidation: max_concurrent only with allow, at least 0; allow
// only for repeating schedules.
func TestAllowValidation(t *testing.T) {
	s := newSched(t, scheduler.Config{Store: dbtest.SQLite(t), Holder: "w", Handler: func(context.Context, sqlease.Run) error { return nil }})
	for _, tc := range []struct {
		sched sqlease.Schedule
		want  string
	}{
		{sqlease.Schedule{Every: time.Minute, MaxConcurrent: 2}, `max_concurrent bounds the occurrences overlap "allow" runs at once`},
		{sqlease.Schedule{Every: time.Minute, Overlap: sqlease.OverlapSkip, MaxConcurrent: 2}, `set it only with overlap allow`},
		{sqlease.Schedule{Every: time.Minute, Overlap: sqlease.OverlapAllow, MaxConcurrent: -1}, `max_concurrent must be between 1 and`},
		{sqlease.Schedule{Overlap: sqlease.OverlapAllow}, `needs a repeating schedule`},
	} {
		_, _, err := s.Create(context.Background(), sqlease.Job{Name: "v", Schedule: tc.sched})
		if !errors.Is(err, sqlease.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Create(%+v) = %v, want ErrInvalidConfig saying %q", tc.sched, err, tc.want)
		}
	}
	if _, _, err := s.Create(context.Background(), sqlease.Job{Name: "ok", Schedule: sqlease.Schedule{Every: time.Minute, Overlap: sqlease.OverlapAllow, MaxConcurrent: 3}}); err != nil {
		t.Fatalf("a valid allow job: %v", err)
	}
}

// TestAllowLeaderTakeover: an occurrence a deposed leader started (and
// then died) is taken by the next leader at once — while the job's later
// occurrences run — and retried with attempt 2 only after the earlier
// terms' holders can no longer act (PriorTermsEnd), never before.
func TestAllowLeaderTakeover(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		const lease = "lead-allow"
		s := newSched(t, scheduler.Config{Store: st, Holder: "new", Handler: func(context.Context, sqlease.Run) error { return nil }})
		j, _, err := s.Create(ctx, sqlease.Job{Name: "take", Schedule: sqlease.Schedule{Every: 200 * time.Millisecond, Overlap: sqlease.OverlapAllow},
			MissedRuns: sqlease.RunAll, Retry: sqlease.Retry{MaxAttempts: 3}})
		if err != nil {
			t.Fatal(err)
		}
		old, err := st.Acquire(ctx, lease, "old", 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		// The old leader spawns and starts the first occurrence, then dies.
		tok := old.Token()
		var due time.Time
		dbtest.WaitFor(t, 5*time.Second, "the old leader to claim the job", func() bool {
			err := st.Fenced(ctx, tok, func(tx *sql.Tx) error {
				c, ok, err := st.ClaimJob(ctx, tx, j.ID, tok)
				if err != nil || !ok {
					return errors.Join(err, errors.New("not claimed"))
				}
				o, err := st.SpawnOccurrence(ctx, tx, c.Lock, c.Name, c.NextRunAt, c.NextRunAt.Add(200*time.Millisecond), tok.Epoch, 0)
				if err != nil {
					return err
				}
				due = o.Occurrence
				_, err = st.StartRun(ctx, tx, o, c.Name, o.Occurrence, 1, tok.Epoch)
				return err
			})
			return err == nil
		})
		var l sqlease.Lease
		dbtest.WaitFor(t, 5*time.Second, "the old lease to expire", func() bool {
			l, err = st.Acquire(ctx, lease, "new", time.Minute)
			return err == nil
		})
		var mu sync.Mutex
		var retriedAt time.Time
		later := 0
		rec := func(ctx context.Context, r sqlease.Run) error {
			mu.Lock()
			defer mu.Unlock()
			if r.ScheduledFor.Equal(due) {
				if r.Attempt != 2 {
					t.Errorf("the deposed leader's occurrence ran as attempt %d, want 2", r.Attempt)
				}
				retriedAt = time.Now()
			} else {
				later++
			}
			return nil
		}
		s2 := newSched(t, scheduler.Config{Store: st, Holder: "new", Handler: rec})
		settled := time.Now().Add(1500 * time.Millisecond)
		leadTerm(t, s2, &settledGate{st: st, tok: l.Token(), settled: settled}, l.Token())
		dbtest.WaitFor(t, 15*time.Second, "the retry of the deposed leader's occurrence", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return !retriedAt.IsZero()
		})
		mu.Lock()
		if retriedAt.Before(settled) {
			t.Errorf("retried %s before the earlier terms could no longer act", settled.Sub(retriedAt))
		}
		if later < 2 {
			t.Errorf("%d later occurrences ran while the retry waited, want them to run meanwhile", later)
		}
		mu.Unlock()
		s2.Drain(ctx)
		for _, r := range mustRuns(t, st, "take") {
			if r.ScheduledFor.Equal(due) && r.Attempt == 1 && r.Outcome != sqlease.OutcomeAbandoned {
				t.Errorf("the deposed leader's attempt is %s, want abandoned", r.Outcome)
			}
		}
		allowLedger(t, st, "take")
	})
}

func mustRuns(t *testing.T, st *sqlstore.Store, job string) []sqlease.Run {
	t.Helper()
	runs, err := st.Runs(context.Background(), job, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	return runs
}
