package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// testJobLifecycle runs one job through the store: the statements the
// scheduler tests reach only indirectly, or not at all. The due time has
// digits below the database's resolution, which the store must truncate,
// never round (a due time moved later would start late).
func testJobLifecycle(t *testing.T, s *sqlstore.Store, resolution time.Duration) {
	ctx := t.Context()
	now, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	due := now.Add(-time.Second).Add(123456789 * time.Nanosecond) // sub-microsecond digits
	j, created, err := s.InsertJob(ctx, sqlstore.StoredJob{Job: sqlease.Job{Name: "life", Key: "k", MissedRuns: sqlease.RunOnce,
		Action: []byte(`{"url":"http://x"}`), LockTimeout: time.Minute}, SpecHash: "h"}, due)
	if err != nil || !created {
		t.Fatalf("InsertJob: created=%v %v", created, err)
	}
	if !j.NextRunAt.Equal(due.Truncate(resolution)) || string(j.Action) != `{"url":"http://x"}` || j.Key != "k" {
		t.Fatalf("inserted %+v", j)
	}
	if w, _, err := s.DueWindow(ctx, time.Minute, 10); err != nil || len(w) != 1 || w[0].ID != j.ID {
		t.Fatalf("DueWindow = %+v, %v", w, err)
	}
	if ch, err := s.Changed(ctx, time.Time{}.Add(time.Hour), 0, 10); err != nil || len(ch) != 1 || ch[0].ID != j.ID {
		t.Fatalf("Changed = %+v, %v", ch, err)
	}
	c, err := s.ClaimDue(ctx, "w", 10)
	if err != nil || len(c) != 1 || c[0].Lock.Holder != "w" || c[0].Lock.Epoch != 1 || c[0].Attempt != 0 {
		t.Fatalf("ClaimDue = %+v, %v", c, err)
	}
	if again, err := s.ClaimDue(ctx, "w2", 10); err != nil || len(again) != 0 {
		t.Fatalf("ClaimDue of a locked job = %+v, %v", again, err)
	}
	if st, err := s.Stats(ctx); err != nil || st != (sqlstore.JobStats{Total: 1, Due: 1, Running: 1}) {
		t.Fatalf("Stats = %+v, %v", st, err)
	}
	run, err := s.StartRun(ctx, nil, c[0].Lock, c[0].Name, c[0].NextRunAt, 1, c[0].Lock.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartRun(ctx, nil, c[0].Lock, c[0].Name, c[0].NextRunAt, 1, c[0].Lock.Epoch); !errors.Is(err, sqlease.ErrConflict) {
		t.Fatalf("second StartRun of one attempt = %v, want ErrConflict", err)
	}
	if err := s.Heartbeat(ctx, c[0].Lock); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRun(ctx, nil, c[0].Lock, run, sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, c[0].Lock); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("Heartbeat after the lock was released = %v, want ErrLeaseLost", err)
	}
	runs, err := s.Runs(ctx, "life", 10)
	if err != nil || len(runs) != 1 || runs[0].Outcome != sqlease.OutcomeSucceeded || !runs[0].ScheduledFor.Equal(c[0].NextRunAt) {
		t.Fatalf("Runs = %+v, %v", runs, err)
	}
	if n, err := s.PruneRuns(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("PruneRuns(1h) = %d, %v; want 0", n, err)
	}
	time.Sleep(2 * time.Millisecond)
	if n, err := s.PruneRuns(ctx, time.Millisecond); err != nil || n != 1 {
		t.Fatalf("PruneRuns(1ms) = %d, %v; want 1", n, err)
	}
	if err := s.DeleteJob(ctx, "life"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteJob(ctx, "life"); !errors.Is(err, sqlease.ErrNoJob) {
		t.Fatalf("second DeleteJob = %v, want ErrNoJob", err)
	}
}
