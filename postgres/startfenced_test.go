package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// TestStartRunsFenced: the leader's start of the runs of recurring jobs,
// fenced in its one statement, starts nothing under a token whose lease is
// not held (another holder's, an earlier epoch's, an expired one) and
// starts as StartRuns does under the lease's own.
func TestStartRunsFenced(t *testing.T) {
	ctx := context.Background()
	st, prefix := newStoreWithPrefix(t)
	if !st.HasStartRunsFenced() {
		t.Fatal("the PostgreSQL store has no StartRunsFenced")
	}
	sched, err := scheduler.New(scheduler.Config{Store: st, Holder: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, name := range []string{"a", "b"} {
		s, _, err := sched.Create(ctx, sqlease.Job{Name: name, MissedRuns: sqlease.RunAll, Schedule: sqlease.Schedule{Every: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	if _, err := st.DB().ExecContext(ctx, `UPDATE `+prefix+`_jobs SET next_run_at = clock_timestamp() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	lease, err := st.Acquire(ctx, "lead", "new", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tok := lease.Token()
	if _, err := st.Acquire(ctx, "short", "new", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	claimed, err := st.ClaimStartJobsFenced(ctx, tok, ids)
	if err != nil || len(claimed) != 2 {
		t.Fatalf("ClaimStartJobsFenced: %d claimed, %v", len(claimed), err)
	}
	reqs := make([]sqlstore.StartReq, len(claimed))
	for i, c := range claimed {
		if c.Started != nil {
			t.Fatalf("the claim started recurring job %s's run", c.Name)
		}
		reqs[i] = sqlstore.StartReq{Lock: c.Lock, Job: c.Name, ScheduledFor: c.NextRunAt, Attempt: 1, RunEpoch: tok.Epoch}
	}
	runs := func() (n int) {
		t.Helper()
		if err := st.DB().QueryRowContext(ctx, `SELECT count(*) FROM `+prefix+`_runs`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, b := range []sqlease.Token{
		{Name: "lead", Holder: "other", Epoch: tok.Epoch},
		{Name: "lead", Holder: "new", Epoch: tok.Epoch + 1},
		{Name: "short", Holder: "new", Epoch: tok.Epoch}, // expired
	} {
		started, err := st.StartRunsFenced(ctx, b, reqs)
		if err != nil || len(started) != 2 || started[0] || started[1] {
			t.Fatalf("StartRunsFenced under %s (not held) = %v, %v; want nothing started", b, started, err)
		}
		if n := runs(); n != 0 {
			t.Fatalf("StartRunsFenced under %s (not held) wrote %d runs", b, n)
		}
	}
	stale := reqs[1]
	stale.Lock.Epoch-- // a lock no longer held
	started, err := st.StartRunsFenced(ctx, tok, []sqlstore.StartReq{reqs[0], stale})
	if err != nil || !started[0] || started[1] {
		t.Fatalf("StartRunsFenced under the lease, one stale lock = %v, %v; want [true false]", started, err)
	}
	if again, err := st.StartRunsFenced(ctx, tok, reqs[:1]); err != nil || again[0] {
		t.Fatalf("starting attempt 1 twice: %v %v, want not started", again, err)
	}
	r, err := st.Runs(ctx, "a", 10)
	if err != nil || len(r) != 1 || r[0].Epoch != tok.Epoch || r[0].Outcome != sqlease.OutcomeRunning || !r[0].ScheduledFor.Equal(reqs[0].ScheduledFor) {
		t.Fatalf("ledger of a: %+v %v", r, err)
	}
	if n := runs(); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
	if _, err := st.StartRunsFenced(ctx, sqlease.Token{Name: "lead", Holder: "new"}, reqs); err == nil {
		t.Fatal("StartRunsFenced with epoch 0: no error")
	}
}
