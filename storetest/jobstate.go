package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// The scenarios of issue 33 items 4–6: a pause's reason and pauses by name
// prefix, a trigger that keeps a schedule's phase and refuses a paused job,
// a job's breaker state written only under its lock, and the outcomes
// skipped and cancelled in the ledger.

// insertJob inserts a job with an every schedule (one-off when every is
// 0) and its first occurrence at next.
func insertJob(t *testing.T, s *sqlstore.Store, name string, every time.Duration, next time.Time, b sqlease.Breaker) sqlstore.StoredJob {
	t.Helper()
	j, created, err := s.InsertJob(t.Context(), sqlstore.StoredJob{Job: sqlease.Job{Name: name, Schedule: sqlease.Schedule{Every: every},
		MissedRuns: sqlease.RunOnce, Retry: sqlease.Retry{MaxAttempts: 1}, LockTimeout: time.Minute, Breaker: b}, SpecHash: name}, next)
	if err != nil || !created {
		t.Fatalf("insert job %s: created=%v %v", name, created, err)
	}
	return j
}

func mustJob(t *testing.T, s *sqlstore.Store, name string) sqlstore.StoredJob {
	t.Helper()
	j, err := s.Job(t.Context(), name)
	if err != nil {
		t.Fatalf("job %s: %v", name, err)
	}
	return j
}

// testPauseReasonAndPrefix: a pause stores its reason and a resume clears
// it; SetPausedPrefix pauses exactly the jobs whose names start with the
// prefix — "_" in it is no wildcard — counts them, and "" means every job.
func testPauseReasonAndPrefix(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	at := dbNow(t, s).Add(time.Hour)
	for _, n := range []string{"a_b.1", "a_b.2", "axb.3"} {
		insertJob(t, s, n, time.Minute, at, sqlease.Breaker{})
	}
	j, err := s.SetPaused(ctx, "axb.3", true, "deploy in progress")
	if err != nil || !j.Paused || j.PauseReason != "deploy in progress" {
		t.Fatalf("SetPaused with a reason = (paused %v, reason %q), %v", j.Paused, j.PauseReason, err)
	}
	if got := mustJob(t, s, "axb.3"); got.PauseReason != "deploy in progress" {
		t.Fatalf("reason read back = %q", got.PauseReason)
	}
	if j, err = s.SetPaused(ctx, "axb.3", false, ""); err != nil || j.Paused || j.PauseReason != "" {
		t.Fatalf("resume = (paused %v, reason %q), %v", j.Paused, j.PauseReason, err)
	}

	n, err := s.SetPausedPrefix(ctx, "a_b", true, "incident 42")
	if err != nil || n != 2 {
		t.Fatalf("SetPausedPrefix(a_b) = %d, %v; want 2", n, err)
	}
	for name, want := range map[string]bool{"a_b.1": true, "a_b.2": true, "axb.3": false} {
		if got := mustJob(t, s, name); got.Paused != want || (want && got.PauseReason != "incident 42") {
			t.Errorf("%s after pausing a_b*: paused %v reason %q, want paused %v", name, got.Paused, got.PauseReason, want)
		}
	}
	// A retry counts the same.
	if n, err = s.SetPausedPrefix(ctx, "a_b", true, "incident 42"); err != nil || n != 2 {
		t.Fatalf("SetPausedPrefix(a_b) again = %d, %v; want 2", n, err)
	}
	if n, err = s.SetPausedPrefix(ctx, "nomatch", true, ""); err != nil || n != 0 {
		t.Fatalf("SetPausedPrefix(nomatch) = %d, %v; want 0", n, err)
	}
	if n, err = s.SetPausedPrefix(ctx, "", false, ""); err != nil || n != 3 {
		t.Fatalf("SetPausedPrefix(\"\", resume) = %d, %v; want 3", n, err)
	}
	for _, name := range []string{"a_b.1", "a_b.2", "axb.3"} {
		if got := mustJob(t, s, name); got.Paused || got.PauseReason != "" {
			t.Errorf("%s after resuming every job: paused %v reason %q", name, got.Paused, got.PauseReason)
		}
	}
}

// testTriggerKeepsPhase: a trigger makes a job due now and keeps the
// regular occurrence it moved aside (a second trigger keeps the first's);
// a job already due keeps its occurrence; a paused job is refused with
// ErrConflict and left alone.
func testTriggerKeepsPhase(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	now := dbNow(t, s)
	regular := now.Add(time.Hour)
	insertJob(t, s, "every", time.Hour, regular, sqlease.Breaker{})
	j, err := s.Trigger(ctx, "every")
	if err != nil {
		t.Fatalf("trigger: %v", err)
	}
	if !j.RegularNextAt.Equal(mustJob(t, s, "every").RegularNextAt) || j.RegularNextAt.Sub(regular).Abs() > time.Millisecond {
		t.Fatalf("regular_next_at = %v, want %v", j.RegularNextAt, regular)
	}
	if j.NextRunAt.After(dbNow(t, s)) || j.NextRunAt.Before(now.Add(-time.Second)) {
		t.Fatalf("next_run_at = %v, want about now (%v)", j.NextRunAt, now)
	}
	first := j.NextRunAt
	if j, err = s.Trigger(ctx, "every"); err != nil || j.RegularNextAt.Sub(regular).Abs() > time.Millisecond || !j.NextRunAt.Equal(first) {
		t.Fatalf("second trigger: next %v (want %v kept: it is due), regular %v (want %v), %v", j.NextRunAt, first, j.RegularNextAt, regular, err)
	}

	due := now.Add(-time.Minute)
	insertJob(t, s, "due", time.Hour, due, sqlease.Breaker{})
	if j, err = s.Trigger(ctx, "due"); err != nil || j.NextRunAt.Sub(due).Abs() > time.Millisecond || !j.RegularNextAt.IsZero() {
		t.Fatalf("trigger of a due job: next %v (want %v), regular %v (want none), %v", j.NextRunAt, due, j.RegularNextAt, err)
	}

	insertJob(t, s, "paused", time.Hour, regular, sqlease.Breaker{})
	if _, err := s.SetPaused(ctx, "paused", true, "maintenance"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Trigger(ctx, "paused"); !errors.Is(err, sqlease.ErrConflict) {
		t.Fatalf("trigger of a paused job: %v, want ErrConflict", err)
	}
	if got := mustJob(t, s, "paused"); got.NextRunAt.Sub(regular).Abs() > time.Millisecond || !got.RegularNextAt.IsZero() {
		t.Fatalf("a refused trigger changed the job: next %v regular %v", got.NextRunAt, got.RegularNextAt)
	}
}

// testBreakerState: a job's breaker is stored with it and returned by
// every claim; FinishRunBreaker writes the breaker's state and the finish
// together, in database time, only under the run's lock: with a lost lock
// it changes neither.
func testBreakerState(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	b := sqlease.Breaker{Failures: 3, CoolDown: time.Minute}
	insertJob(t, s, "brk", time.Hour, dbNow(t, s).Add(-time.Second), b)
	if got := mustJob(t, s, "brk"); got.Breaker != b || !got.BreakerOpenedAt.IsZero() || got.BreakerFailures != 0 {
		t.Fatalf("breaker read back = %+v opened %v failures %d", got.Breaker, got.BreakerOpenedAt, got.BreakerFailures)
	}
	claimed, err := s.ClaimDue(ctx, "w", 10)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	c := claimed[0]
	if c.Breaker != b {
		t.Fatalf("claimed breaker = %+v, want %+v", c.Breaker, b)
	}
	r, err := s.StartRun(ctx, nil, c.Lock, c.Name, c.NextRunAt, 1, c.Lock.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	f := sqlstore.Finish{Outcome: sqlease.OutcomeFailed, Error: "boom", Next: c.NextRunAt.Add(-time.Millisecond)}
	open := sqlstore.BreakerUpdate{Failures: 3, Open: true, Changed: true}
	stale := c.Lock
	stale.Epoch++
	if err := s.FinishRunBreaker(ctx, nil, stale, r, f, open); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("FinishRunBreaker under a lost lock: %v, want ErrLeaseLost", err)
	}
	if got := mustJob(t, s, "brk"); got.BreakerFailures != 0 || !got.BreakerOpenedAt.IsZero() || got.LockedBy == "" {
		t.Fatalf("a refused FinishRunBreaker wrote: failures %d opened %v locked by %q", got.BreakerFailures, got.BreakerOpenedAt, got.LockedBy)
	}
	before := dbNow(t, s)
	if err := s.FinishRunBreaker(ctx, nil, c.Lock, r, f, open); err != nil {
		t.Fatalf("FinishRunBreaker: %v", err)
	}
	after := dbNow(t, s)
	got := mustJob(t, s, "brk")
	if got.BreakerFailures != 3 || got.BreakerOpenedAt.Before(before.Add(-time.Millisecond)) || got.BreakerOpenedAt.After(after.Add(time.Millisecond)) ||
		!got.BreakerChangedAt.Equal(got.BreakerOpenedAt) || got.LockedBy != "" {
		t.Fatalf("after opening: failures %d opened %v changed %v (want within [%v, %v]) locked by %q",
			got.BreakerFailures, got.BreakerOpenedAt, got.BreakerChangedAt, before, after, got.LockedBy)
	}
	if state, since := got.BreakerState(after); state != sqlease.BreakerOpen || !since.Equal(got.BreakerOpenedAt) {
		t.Fatalf("state = %s since %v", state, since)
	}
	if runs, err := s.Runs(ctx, "brk", 10); err != nil || len(runs) != 1 || runs[0].Outcome != sqlease.OutcomeFailed {
		t.Fatalf("runs = %+v, %v", runs, err)
	}
	// The next claim (every claim statement) carries the state.
	var again []sqlstore.Claimed
	if s.Batched() {
		again, err = s.ClaimAndStart(ctx, "w", 10, sqlstore.ClaimCursor{})
	} else {
		again, err = s.ClaimDue(ctx, "w", 10)
	}
	if err != nil || len(again) != 1 {
		t.Fatalf("claim again: %d, %v", len(again), err)
	}
	if c := again[0]; c.Breaker != b || c.BreakerFailures != 3 || !c.BreakerOpenedAt.Equal(got.BreakerOpenedAt) {
		t.Fatalf("claimed again: breaker %+v failures %d opened %v", c.Breaker, c.BreakerFailures, c.BreakerOpenedAt)
	}
	// Closing keeps the count at 0 and stamps the change.
	c = again[0]
	if r, err = s.StartRun(ctx, nil, c.Lock, c.Name, c.NextRunAt, 1, c.Lock.Epoch); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRunBreaker(ctx, nil, c.Lock, r, sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded, Next: c.NextRunAt.Add(time.Hour)},
		sqlstore.BreakerUpdate{Changed: true}); err != nil {
		t.Fatal(err)
	}
	closed := mustJob(t, s, "brk")
	if closed.BreakerFailures != 0 || !closed.BreakerOpenedAt.IsZero() || !closed.BreakerChangedAt.After(got.BreakerChangedAt) {
		t.Fatalf("after closing: failures %d opened %v changed %v", closed.BreakerFailures, closed.BreakerOpenedAt, closed.BreakerChangedAt)
	}
	if state, _ := closed.BreakerState(dbNow(t, s)); state != sqlease.BreakerClosed {
		t.Fatalf("state after closing = %s", state)
	}
}

// testSkippedAndCancelled: SkipRun records an occurrence as skipped,
// finished, with its error, and releases the job to its next occurrence in
// one write under the lock; a run can end cancelled. Both read back.
func testSkippedAndCancelled(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	due := dbNow(t, s).Add(-time.Second)
	insertJob(t, s, "skipper", time.Hour, due, sqlease.Breaker{Failures: 1, CoolDown: time.Minute})
	claimed, err := s.ClaimDue(ctx, "w", 10)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	c := claimed[0]
	next := c.NextRunAt.Add(time.Hour)
	stale := c.Lock
	stale.Epoch++
	f := sqlstore.Finish{Outcome: sqlease.OutcomeSkipped, Error: sqlease.BreakerOpenError, Next: next}
	if _, err := s.SkipRun(ctx, nil, stale, c.Name, c.NextRunAt, 1, stale.Epoch, f); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("SkipRun under a lost lock: %v, want ErrLeaseLost", err)
	}
	if runs, err := s.Runs(ctx, "skipper", 10); err != nil || len(runs) != 0 {
		t.Fatalf("a refused SkipRun wrote runs: %+v, %v", runs, err)
	}
	if _, err := s.SkipRun(ctx, nil, c.Lock, c.Name, c.NextRunAt, 1, c.Lock.Epoch, f); err != nil {
		t.Fatalf("SkipRun: %v", err)
	}
	runs, err := s.Runs(ctx, "skipper", 10)
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs = %+v, %v", runs, err)
	}
	if r := runs[0]; r.Outcome != sqlease.OutcomeSkipped || r.Error != sqlease.BreakerOpenError || r.FinishedAt.IsZero() || r.Attempt != 1 {
		t.Fatalf("skipped run = %+v", r)
	}
	j := mustJob(t, s, "skipper")
	if j.LockedBy != "" || j.NextRunAt.Sub(next).Abs() > time.Millisecond || j.Attempt != 0 {
		t.Fatalf("after the skip: locked by %q next %v (want %v) attempt %d", j.LockedBy, j.NextRunAt, next, j.Attempt)
	}

	lock, r := startedRun(t, s, "canceller", "w2")
	if err := s.FinishRun(ctx, nil, lock, r, sqlstore.Finish{Outcome: sqlease.OutcomeCancelled, Error: "cancelled: a newer occurrence started"}); err != nil {
		t.Fatalf("finish as cancelled: %v", err)
	}
	if runs, err := s.Runs(ctx, "canceller", 10); err != nil || len(runs) != 1 || runs[0].Outcome != sqlease.OutcomeCancelled {
		t.Fatalf("cancelled run = %+v, %v", runs, err)
	}
}
