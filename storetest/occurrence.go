package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// allowJob inserts an overlap allow job every `every`, first due at next.
func allowJob(t *testing.T, s *sqlstore.Store, name string, every, lockTimeout time.Duration, maxAttempts int, next time.Time) sqlstore.StoredJob {
	t.Helper()
	j, created, err := s.InsertJob(t.Context(), sqlstore.StoredJob{Job: sqlease.Job{Name: name,
		Schedule:   sqlease.Schedule{Every: every, Overlap: sqlease.OverlapAllow},
		MissedRuns: sqlease.RunAll, Retry: sqlease.Retry{MaxAttempts: maxAttempts}, LockTimeout: lockTimeout}, SpecHash: name}, next)
	if err != nil || !created {
		t.Fatalf("insert job %s: created=%v %v", name, created, err)
	}
	return j
}

// claimOne claims the one due job of the store as holder (under tok when
// given).
func claimOne(t *testing.T, s *sqlstore.Store, holder string, tok *sqlease.Token) (sqlstore.Claimed, bool) {
	t.Helper()
	var c []sqlstore.Claimed
	var err error
	if tok != nil {
		c, err = s.ClaimDueUnder(t.Context(), *tok, 1)
	} else {
		c, err = s.ClaimDue(t.Context(), holder, 1)
	}
	if err != nil {
		t.Fatalf("claim as %s: %v", holder, err)
	}
	if len(c) == 0 {
		return sqlstore.Claimed{}, false
	}
	return c[0], true
}

// occurrences counts the job's occurrence rows.
func occurrences(t *testing.T, s *sqlstore.Store, jobID int64) int {
	t.Helper()
	n, err := s.Occurrences(t.Context(), jobID)
	if err != nil {
		t.Fatalf("Occurrences: %v", err)
	}
	return n
}

// claimOccurrencesUntil claims occurrences as holder under le until one
// comes back (or the wait times out).
func claimOccurrencesUntil(t *testing.T, s *sqlstore.Store, holder string, le int64) sqlstore.Claimed {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for time.Now().Before(deadline) {
		c, err := s.ClaimOccurrences(t.Context(), nil, holder, le, 10)
		if err != nil {
			t.Fatalf("ClaimOccurrences(%s): %v", holder, err)
		}
		if len(c) > 1 {
			t.Fatalf("ClaimOccurrences(%s) took %d occurrences, want one", holder, len(c))
		}
		if len(c) == 1 {
			return c[0]
		}
		time.Sleep(pollEvery)
	}
	t.Fatalf("no occurrence became claimable for %s within %s", holder, waitTimeout)
	return sqlstore.Claimed{}
}

func noOccurrenceClaimable(t *testing.T, s *sqlstore.Store, holder string, le int64, why string) {
	t.Helper()
	c, err := s.ClaimOccurrences(t.Context(), nil, holder, le, 10)
	if err != nil {
		t.Fatalf("ClaimOccurrences(%s): %v", holder, err)
	}
	if len(c) != 0 {
		t.Fatalf("%s: ClaimOccurrences(%s) took %s@%d, want none", why, holder, c[0].Lock.Occurrence.Format(time.RFC3339Nano), c[0].Lock.Epoch)
	}
}

// testOccurrenceLocks: an overlap allow job's claim becomes the claim of
// one occurrence (SpawnOccurrence): the job row is released at once at its
// next occurrence, so that another claimer takes that one while the first
// runs — up to max_concurrent rows, then the spawn changes nothing. Each
// occurrence's runs are fenced by its own row's lock: a stale epoch writes
// nothing. A success deletes the row; a failure to retry unlocks it with a
// backoff, after which it is claimed again (ClaimOccurrences) with attempt
// + 1 and the checkpoint of the attempt before. Paused jobs' occurrences
// are not claimed; a deleted job's go with it.
func testOccurrenceLocks(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	t0 := dbNow(t, s).Add(-time.Second).Truncate(time.Millisecond)
	every := 100 * time.Millisecond
	j := allowJob(t, s, "allow", every, time.Hour, 3, t0)

	// Two occurrences in flight at once, for two holders.
	c1, ok := claimOne(t, s, "w1", nil)
	if !ok {
		t.Fatal("the allow job was not claimed")
	}
	o1, err := s.SpawnOccurrence(ctx, nil, c1.Lock, c1.Name, t0, t0.Add(every), 0, 2)
	if err != nil {
		t.Fatalf("SpawnOccurrence: %v", err)
	}
	if got := mustJob(t, s, "allow"); got.LockedBy != "" || !got.NextRunAt.Equal(t0.Add(every)) || got.Attempt != 0 {
		t.Fatalf("after a spawn the job is locked by %q at %s attempt %d, want unlocked at %s", got.LockedBy, got.NextRunAt, got.Attempt, t0.Add(every))
	}
	// The job lock is spent: a second spawn under it is refused.
	if _, err := s.SpawnOccurrence(ctx, nil, c1.Lock, c1.Name, t0.Add(every), t0.Add(2*every), 0, 2); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("a spawn under a released job lock: %v, want ErrLeaseLost", err)
	}
	c2, ok := claimOne(t, s, "w2", nil)
	if !ok || !c2.NextRunAt.Equal(t0.Add(every)) {
		t.Fatalf("second claim: ok=%v at %s, want the next occurrence %s while the first is in flight", ok, c2.NextRunAt, t0.Add(every))
	}
	o2, err := s.SpawnOccurrence(ctx, nil, c2.Lock, c2.Name, c2.NextRunAt, c2.NextRunAt.Add(every), 0, 2)
	if err != nil {
		t.Fatalf("second SpawnOccurrence: %v", err)
	}
	r1, err := s.StartRun(ctx, nil, o1, "allow", t0, 1, o1.Epoch)
	if err != nil {
		t.Fatalf("start the first occurrence: %v", err)
	}
	r2, err := s.StartRun(ctx, nil, o2, "allow", o2.Occurrence, 1, o2.Epoch)
	if err != nil {
		t.Fatalf("start the second occurrence: %v", err)
	}
	running := 0
	for _, r := range jobRuns(t, s, "allow") {
		if r.Outcome == sqlease.OutcomeRunning {
			running++
		}
	}
	if running != 2 {
		t.Fatalf("%d runs running, want the two occurrences at once", running)
	}

	// The bound: a third spawn changes nothing, the job stays locked.
	c3, ok := claimOne(t, s, "w3", nil)
	if !ok {
		t.Fatal("third claim: the job is due and unlocked, want it claimed")
	}
	if _, err := s.SpawnOccurrence(ctx, nil, c3.Lock, c3.Name, c3.NextRunAt, c3.NextRunAt.Add(every), 0, 2); !errors.Is(err, sqlstore.ErrOccurrencesFull) {
		t.Fatalf("a third spawn with max_concurrent 2: %v, want ErrOccurrencesFull", err)
	}
	if got := mustJob(t, s, "allow"); got.LockedBy != "w3" || !got.NextRunAt.Equal(c3.NextRunAt) {
		t.Fatalf("after a full spawn the job is locked by %q at %s, want w3's lock at %s kept", got.LockedBy, got.NextRunAt, c3.NextRunAt)
	}
	if n := occurrences(t, s, j.ID); n != 2 {
		t.Fatalf("%d occurrence rows, want 2", n)
	}
	// Giving that claim back leaves the occurrences in flight running: a
	// job lock's release abandons only a run of the job row's own
	// occurrence.
	if err := s.GiveBack(ctx, nil, c3.Lock, c3.NextRunAt, 0, 0); err != nil {
		t.Fatalf("give back the full claim: %v", err)
	}
	for _, r := range jobRuns(t, s, "allow") {
		if r.Outcome != sqlease.OutcomeRunning {
			t.Fatalf("run %s attempt %d is %s after a job claim was given back, want running", r.ScheduledFor, r.Attempt, r.Outcome)
		}
	}
	if c3, ok = claimOne(t, s, "w3", nil); !ok {
		t.Fatal("the job given back was not claimed again")
	}

	// Fencing: a stale epoch, or another occurrence's lock, writes nothing.
	stale := o1
	stale.Epoch++
	if err := s.Heartbeat(ctx, stale); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Errorf("heartbeat under a wrong epoch: %v, want ErrLeaseLost", err)
	}
	other := o1
	other.Occurrence = o2.Occurrence
	if err := s.FinishRun(ctx, nil, other, r1, sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Errorf("finish under another occurrence's key: %v, want ErrLeaseLost", err)
	}
	if err := s.Heartbeat(ctx, o1); err != nil {
		t.Errorf("heartbeat of the first occurrence: %v", err)
	}
	if err := s.SaveCheckpoint(ctx, nil, o2, r2, json.RawMessage(`{"at": 2}`)); err != nil {
		t.Fatalf("checkpoint of the second occurrence: %v", err)
	}
	if err := s.SaveCheckpoint(ctx, nil, stale, r1, json.RawMessage(`{"at": "stale"}`)); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Errorf("checkpoint under a wrong epoch: %v, want ErrLeaseLost", err)
	}

	// A success deletes the row; the held spawn now fits.
	if err := s.FinishRun(ctx, nil, o1, r1, sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}); err != nil {
		t.Fatalf("finish the first occurrence: %v", err)
	}
	if err := s.FinishRun(ctx, nil, o1, r1, sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Errorf("a second finish of a finished occurrence: %v, want ErrLeaseLost", err)
	}
	o3, err := s.SpawnOccurrence(ctx, nil, c3.Lock, c3.Name, c3.NextRunAt, c3.NextRunAt.Add(every), 0, 2)
	if err != nil {
		t.Fatalf("spawn once a slot is free: %v", err)
	}

	// A failure to retry: unlocked with a backoff, not claimable before it
	// ends, then taken with its attempt count and checkpoint.
	backoff := 400 * time.Millisecond
	f := sqlstore.Finish{Outcome: sqlease.OutcomeFailed, Error: "boom", Next: o2.Occurrence, Attempt: 1, Backoff: backoff}
	before := dbNow(t, s)
	if err := s.FinishRun(ctx, nil, o2, r2, f); err != nil {
		t.Fatalf("fail the second occurrence: %v", err)
	}
	noOccurrenceClaimable(t, s, "w4", 0, "during the retry's backoff")
	c := claimOccurrencesUntil(t, s, "w4", 0)
	if waited := dbNow(t, s).Sub(before); waited < backoff {
		t.Errorf("retry claimed %s after the failure, before its backoff of %s", waited, backoff)
	}
	if c.ID != j.ID || c.Name != "allow" || !c.NextRunAt.Equal(o2.Occurrence) || !c.Lock.Occurrence.Equal(o2.Occurrence) ||
		c.Attempt != 1 || c.Lock.Holder != "w4" || c.Lock.Epoch <= o2.Epoch {
		t.Fatalf("retry claimed as %s %s attempt %d lock %+v, want %s attempt 1 for w4 above epoch %d", c.Name, c.NextRunAt, c.Attempt, c.Lock, o2.Occurrence, o2.Epoch)
	}
	if c.Schedule.Overlap != sqlease.OverlapAllow || c.Retry.MaxAttempts != 3 {
		t.Errorf("retry claimed without its job's spec: %+v", c.StoredJob.Job)
	}
	if v, from, err := s.LatestCheckpoint(ctx, j.ID, c.NextRunAt, 2); err != nil || string(v) != `{"at": 2}` || from != 1 {
		t.Errorf("attempt 2 resumes from %s (attempt %d, %v), want the first attempt's checkpoint", v, from, err)
	}
	r2b, err := s.StartRun(ctx, nil, c.Lock, "allow", c.NextRunAt, 2, c.Lock.Epoch)
	if err != nil {
		t.Fatalf("start attempt 2: %v", err)
	}
	if _, err := s.StartRun(ctx, nil, o2, "allow", o2.Occurrence, 2, o2.Epoch); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Errorf("a start under the first attempt's lock: %v, want ErrLeaseLost", err)
	}
	if err := s.FinishRun(ctx, nil, c.Lock, r2b, sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}); err != nil {
		t.Fatalf("finish attempt 2: %v", err)
	}
	var outcomes []string
	for _, r := range jobRuns(t, s, "allow") {
		if r.ScheduledFor.Equal(o2.Occurrence) {
			outcomes = append(outcomes, fmt.Sprintf("%d:%s", r.Attempt, r.Outcome))
		}
	}
	if fmt.Sprint(outcomes) != "[2:succeeded 1:failed]" {
		t.Errorf("runs of the retried occurrence %v, want [2:succeeded 1:failed]", outcomes)
	}

	// Paused: its occurrences wait; resumed: taken. A start that failed
	// gives the occurrence back with its count (ReleaseUnrun), it is not
	// dropped.
	if err := s.ReleaseUnrun(ctx, nil, o3, o3.Occurrence, 0); err != nil {
		t.Fatalf("give back the third occurrence: %v", err)
	}
	if _, err := s.SetPaused(ctx, "allow", true, ""); err != nil {
		t.Fatal(err)
	}
	noOccurrenceClaimable(t, s, "w5", 0, "paused")
	if _, err := s.SetPaused(ctx, "allow", false, ""); err != nil {
		t.Fatal(err)
	}
	if c := claimOccurrencesUntil(t, s, "w5", 0); !c.NextRunAt.Equal(o3.Occurrence) || c.Attempt != 0 {
		t.Errorf("given back occurrence claimed at %s attempt %d, want %s attempt 0", c.NextRunAt, c.Attempt, o3.Occurrence)
	}

	// Deleted: the occurrence rows go with the job.
	if err := s.DeleteJob(ctx, "allow"); err != nil {
		t.Fatal(err)
	}
	if n := occurrences(t, s, j.ID); n != 0 {
		t.Errorf("%d occurrence rows of a deleted job", n)
	}
}

// testOccurrenceReclaim: an occurrence whose holder stopped is taken again
// by the same bounds as a job lock — after the job's lock_timeout, at once
// when the worker lease it was taken under has expired, at once by a leader
// of a later term — and not before; the new holder's attempt is the next,
// the interrupted one is marked abandoned when it starts, and the old
// holder's writes are refused.
func testOccurrenceReclaim(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	t0 := dbNow(t, s).Add(-time.Second).Truncate(time.Millisecond)
	lockTimeout := 700 * time.Millisecond
	j := allowJob(t, s, "reclaim", time.Hour, lockTimeout, 5, t0)

	spawnStarted := func(holder string, tok *sqlease.Token, le int64) (sqlstore.Lock, sqlease.Run) {
		t.Helper()
		c, ok := claimOne(t, s, holder, tok)
		if !ok {
			t.Fatalf("%s claimed nothing", holder)
		}
		o, err := s.SpawnOccurrence(ctx, nil, c.Lock, c.Name, c.NextRunAt, c.NextRunAt.Add(time.Hour), le, 0)
		if err != nil {
			t.Fatalf("spawn: %v", err)
		}
		r, err := s.StartRun(ctx, nil, o, c.Name, o.Occurrence, 1, o.Epoch)
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		return o, r
	}

	// lock_timeout.
	// Measured from before the spawn: the lock's time is written within
	// it, at the database's now. Read after it returned, a loaded machine
	// saw the reclaim "694.8ms after the start".
	before := dbNow(t, s)
	o, r := spawnStarted("w1", nil, 0)
	noOccurrenceClaimable(t, s, "w2", 0, "a live lock")
	c := claimOccurrencesUntil(t, s, "w2", 0)
	if waited := dbNow(t, s).Sub(before); waited < lockTimeout {
		t.Errorf("reclaimed %s after the spawn and start, before lock_timeout %s", waited, lockTimeout)
	}
	if !c.Reclaimed || c.Attempt != 1 || !c.NextRunAt.Equal(o.Occurrence) || c.Lock.Epoch <= o.Epoch {
		t.Fatalf("reclaimed as reclaimed=%v attempt %d at %s epoch %d, want a reclaim of attempt 1 at %s above epoch %d",
			c.Reclaimed, c.Attempt, c.NextRunAt, c.Lock.Epoch, o.Occurrence, o.Epoch)
	}
	if err := s.Heartbeat(ctx, o); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Errorf("the old holder's heartbeat: %v, want ErrLeaseLost", err)
	}
	if err := s.FinishRun(ctx, nil, o, r, sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Errorf("the old holder's finish: %v, want ErrLeaseLost", err)
	}
	r2, err := s.StartRun(ctx, nil, c.Lock, c.Name, c.NextRunAt, c.Attempt+1, c.Lock.Epoch)
	if err != nil {
		t.Fatalf("start attempt 2: %v", err)
	}
	for _, run := range jobRuns(t, s, "reclaim") {
		if run.Attempt == 1 && run.Outcome != sqlease.OutcomeAbandoned {
			t.Errorf("the interrupted attempt is %s, want abandoned", run.Outcome)
		}
	}
	if err := s.FinishRun(ctx, nil, c.Lock, r2, sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}); err != nil {
		t.Fatalf("finish attempt 2: %v", err)
	}

	// A worker lease: taken at once once it has expired, long before
	// lock_timeout would pass... which is an hour here.
	if err := s.DeleteJob(ctx, "reclaim"); err != nil {
		t.Fatal(err)
	}
	j = allowJob(t, s, "reclaim", time.Hour, time.Hour, 5, t0)
	wl, err := s.Acquire(ctx, sqlstore.WorkerLeasePrefix+"w1", "w1", 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	tok := wl.Token()
	o, _ = spawnStarted("w1", &tok, -tok.Epoch)
	noOccurrenceClaimable(t, s, "w2", 0, "the worker lease lives")
	c = claimOccurrencesUntil(t, s, "w2", 0)
	if !mustLease(t, s, tok.Name).Expired() {
		t.Errorf("reclaimed while the worker lease %s had not expired", tok.Name)
	}
	if c.ID != j.ID || !c.NextRunAt.Equal(o.Occurrence) || c.Attempt != 1 {
		t.Errorf("reclaimed %s attempt %d, want %s attempt 1", c.NextRunAt, c.Attempt, o.Occurrence)
	}
	if err := s.ReleaseUnrun(ctx, nil, c.Lock, time.Time{}, 0); err != nil {
		t.Fatalf("drop the occurrence: %v", err)
	}
	if n := occurrences(t, s, j.ID); n != 0 {
		t.Errorf("%d occurrence rows after a release that ends it", n)
	}

	// A leader's term: a later term takes it at once, the same or an
	// earlier term does not.
	if err := s.DeleteJob(ctx, "reclaim"); err != nil {
		t.Fatal(err)
	}
	allowJob(t, s, "reclaim", time.Hour, time.Hour, 5, t0)
	o, _ = spawnStarted("leader-a", nil, 7)
	noOccurrenceClaimable(t, s, "leader-b", 7, "its own term")
	noOccurrenceClaimable(t, s, "leader-b", 6, "an older term")
	noOccurrenceClaimable(t, s, "w2", 0, "a claim without a term")
	if c := claimOccurrencesUntil(t, s, "leader-b", 8); !c.NextRunAt.Equal(o.Occurrence) || c.Attempt != 1 {
		t.Errorf("the next term took %s attempt %d, want %s attempt 1", c.NextRunAt, c.Attempt, o.Occurrence)
	}
}

// testOccurrenceBoundRace: claimers racing over one allow job with
// max_concurrent 3 — each claims the job, spawns its due occurrence (or
// gives the claim back when full), holds it a moment and finishes it —
// never have more than 3 occurrence rows at once, spawn each occurrence
// once and skip none.
func testOccurrenceBoundRace(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	const bound, want = 3, 60
	every := 10 * time.Millisecond
	t0 := dbNow(t, s).Add(-time.Duration(want) * every).Truncate(time.Millisecond)
	j := allowJob(t, s, "race", every, time.Hour, 1, t0)
	warmPool(t, s.DB(), 12)

	var mu sync.Mutex
	spawned := map[time.Time]string{}
	var inFlight, peak atomic.Int32
	var done atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	report := func(err error) {
		select {
		case errs <- err:
		default: // enough reported
		}
	}
	for w := range 8 {
		holder := fmt.Sprintf("w%d", w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done.Load() && ctx.Err() == nil {
				cs, err := s.ClaimDue(ctx, holder, 1)
				if err != nil {
					report(err)
					return
				}
				if len(cs) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				c := cs[0]
				o, err := s.SpawnOccurrence(ctx, nil, c.Lock, c.Name, c.NextRunAt, c.NextRunAt.Add(every), 0, bound)
				if errors.Is(err, sqlstore.ErrOccurrencesFull) {
					if err := s.ReleaseUnrun(ctx, nil, c.Lock, c.NextRunAt, 0); err != nil {
						report(err)
						return
					}
					continue
				}
				if err != nil {
					report(err)
					return
				}
				n := inFlight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				if rows, err := s.Occurrences(ctx, j.ID); err != nil || rows > bound {
					report(fmt.Errorf("%d occurrence rows (%v), at most %d", rows, err, bound))
				}
				mu.Lock()
				if prev, dup := spawned[o.Occurrence]; dup {
					report(fmt.Errorf("occurrence %s spawned by %s and %s", o.Occurrence, prev, holder))
				}
				spawned[o.Occurrence] = holder
				if len(spawned) >= want {
					done.Store(true)
				}
				mu.Unlock()
				r, err := s.StartRun(ctx, nil, o, c.Name, o.Occurrence, 1, o.Epoch)
				if err != nil {
					report(err)
					return
				}
				time.Sleep(3 * time.Millisecond)
				inFlight.Add(-1)
				if err := s.FinishRun(ctx, nil, o, r, sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}); err != nil {
					report(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if p := peak.Load(); p > bound {
		t.Errorf("%d occurrences in flight at once, at most %d", p, bound)
	}
	for i := range want {
		if at := t0.Add(time.Duration(i) * every); spawned[at] == "" {
			t.Errorf("occurrence %s (%d of %d) never spawned", at.Format(time.RFC3339Nano), i+1, want)
		}
	}
}

// jobRuns lists a job's runs, newest first.
func jobRuns(t *testing.T, s *sqlstore.Store, job string) []sqlease.Run {
	t.Helper()
	runs, err := s.Runs(t.Context(), job, 100)
	if err != nil {
		t.Fatalf("Runs(%s): %v", job, err)
	}
	return runs
}
