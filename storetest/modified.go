package storetest

import (
	"database/sql"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// testClaimKeepsModified: every way of claiming a job (claim mode's
// ClaimDue and ClaimAndStart, the leader's ClaimJob and ClaimJobs) and a
// heartbeat write only the lock columns and leave last_modified_at alone —
// no index covers what they write, which on PostgreSQL makes a claim a HOT
// update — while a run's finish, which writes the schedule, moves it; and
// the leader's change cursor (Changed) leaves out a job with no occurrence
// to come.
func testClaimKeepsModified(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	job := func(name string) sqlstore.StoredJob {
		t.Helper()
		j, err := s.Job(ctx, name)
		if err != nil {
			t.Fatalf("job %s: %v", name, err)
		}
		return j
	}
	names := []string{"due-claim", "due-claim-start", "due-lead", "due-lead-many"}
	for _, n := range names {
		if _, _, err := s.InsertJob(ctx, sqlstore.StoredJob{Job: sqlease.Job{Name: n, MissedRuns: sqlease.RunOnce,
			Retry: sqlease.Retry{MaxAttempts: 3}, LockTimeout: time.Hour}, SpecHash: n}, dbNow(t, s).Add(-time.Second)); err != nil {
			t.Fatalf("insert job %s: %v", n, err)
		}
	}
	before := map[string]time.Time{}
	for _, n := range names {
		before[n] = job(n).LastModifiedAt
	}
	// Past the stamp's resolution (microseconds on MySQL), so that a write
	// that moved it could not leave it equal.
	time.Sleep(5 * time.Millisecond)

	c, err := s.ClaimDue(ctx, "w", 1)
	if err != nil || len(c) != 1 || c[0].Name != "due-claim" {
		t.Fatalf("ClaimDue: %d claimed, %v", len(c), err)
	}
	claimed := c[0]
	if err := s.Heartbeat(ctx, claimed.Lock); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if c, err = s.ClaimAndStart(ctx, "w", 1, sqlstore.ClaimCursor{}); err != nil || len(c) != 1 || c[0].Name != "due-claim-start" {
		t.Fatalf("ClaimAndStart: %d claimed, %v", len(c), err)
	}
	tok := mustAcquire(t, s, "lead", "leader", time.Minute).Token()
	err = s.Fenced(ctx, tok, func(tx *sql.Tx) error {
		if _, ok, err := s.ClaimJob(ctx, tx, job("due-lead").ID, tok); err != nil || !ok {
			t.Errorf("ClaimJob: claimed %v, %v", ok, err)
		}
		if s.Batched() {
			if c, err := s.ClaimJobs(ctx, tx, []int64{job("due-lead-many").ID}, tok); err != nil || len(c) != 1 {
				t.Errorf("ClaimJobs: %d claimed, %v", len(c), err)
			}
		} else if _, ok, err := s.ClaimJob(ctx, tx, job("due-lead-many").ID, tok); err != nil || !ok {
			t.Errorf("ClaimJob: claimed %v, %v", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		j := job(n)
		if j.LockedBy == "" {
			t.Errorf("%s is not locked after its claim", n)
		}
		if !j.LastModifiedAt.Equal(before[n]) {
			t.Errorf("%s: last_modified_at %s after a claim, was %s: a claim writes only the lock columns", n,
				j.LastModifiedAt.Format(time.RFC3339Nano), before[n].Format(time.RFC3339Nano))
		}
	}

	run, err := s.StartRun(ctx, nil, claimed.Lock, claimed.Name, claimed.NextRunAt, 1, claimed.Lock.Epoch)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if err := s.FinishRun(ctx, nil, claimed.Lock, run, sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}); err != nil {
		t.Fatalf("finish: %v", err)
	}
	if j := job("due-claim"); !j.LastModifiedAt.After(before["due-claim"]) {
		t.Errorf("last_modified_at %s after a run's finish, was %s: a finish writes the schedule and must move it",
			j.LastModifiedAt.Format(time.RFC3339Nano), before["due-claim"].Format(time.RFC3339Nano))
	}

	// The leader's change cursor reads jobs with an occurrence to come
	// only: the finished one-off job has none, the claimed ones do.
	changed, err := s.Changed(ctx, before["due-claim"].Add(-time.Second), 0, 100)
	if err != nil {
		t.Fatalf("Changed: %v", err)
	}
	seen := map[int64]bool{}
	for _, e := range changed {
		seen[e.ID] = true
	}
	if seen[claimed.ID] {
		t.Errorf("Changed returned %s, which has no occurrence left", claimed.Name)
	}
	for _, n := range names[1:] {
		if !seen[job(n).ID] {
			t.Errorf("Changed left out %s, which has an occurrence to come", n)
		}
	}
}
