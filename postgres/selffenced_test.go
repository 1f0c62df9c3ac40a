package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// TestSelfFenced: the leader's claim and finish that fence themselves in
// their one statement write nothing under a token whose lease is not held
// (another holder's, an earlier epoch's, an expired one) and write as
// ClaimStartJobs and FinishRuns do under the lease's own.
func TestSelfFenced(t *testing.T) {
	ctx := context.Background()
	st, prefix := newStoreWithPrefix(t)
	if !st.SelfFenced(st) {
		t.Fatal("the PostgreSQL store does not fence its leader statements by itself")
	}
	ids := createJobs(t, st, sqlease.Job{Name: "once"}, sqlease.Job{Name: "twice"})
	tok, bad := leaderTokens(t, st)
	state := func() (locked, runs int) {
		t.Helper()
		if err := st.DB().QueryRowContext(ctx, `SELECT (SELECT count(*) FROM `+prefix+`_jobs WHERE locked_by IS NOT NULL),
	(SELECT count(*) FROM `+prefix+`_runs)`).Scan(&locked, &runs); err != nil {
			t.Fatal(err)
		}
		return locked, runs
	}
	for _, b := range bad {
		claimed, err := st.ClaimStartJobsFenced(ctx, b, ids)
		if err != nil || len(claimed) != 0 {
			t.Fatalf("ClaimStartJobsFenced under %s (not held): %d claimed, %v", b, len(claimed), err)
		}
		if locked, runs := state(); locked != 0 || runs != 0 {
			t.Fatalf("ClaimStartJobsFenced under %s (not held) wrote: %d jobs locked, %d runs", b, locked, runs)
		}
	}
	claimed, err := st.ClaimStartJobsFenced(ctx, tok, ids)
	if err != nil || len(claimed) != 2 {
		t.Fatalf("ClaimStartJobsFenced under the lease: %d claimed, %v", len(claimed), err)
	}
	reqs := make([]sqlstore.FinishReq, 0, len(claimed))
	for _, c := range claimed {
		if c.Started == nil || c.Started.Epoch != tok.Epoch || c.Lock.Holder != "new" {
			t.Fatalf("claim of %s: started %+v, lock %+v", c.Name, c.Started, c.Lock)
		}
		reqs = append(reqs, sqlstore.FinishReq{Lock: c.Lock, Run: *c.Started, Finish: sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded, Output: "out"}})
	}
	for _, b := range bad {
		done, err := st.FinishRunsFenced(ctx, b, reqs)
		if err != nil || len(done) != 2 || done[0] || done[1] {
			t.Fatalf("FinishRunsFenced under %s (not held) = %v, %v; want nothing done", b, done, err)
		}
		var finished, outputs int
		if err := st.DB().QueryRowContext(ctx, `SELECT (SELECT count(*) FROM `+prefix+`_runs WHERE outcome <> 'running'),
	(SELECT count(*) FROM `+prefix+`_run_output)`).Scan(&finished, &outputs); err != nil {
			t.Fatal(err)
		}
		if locked, _ := state(); locked != 2 || finished != 0 || outputs != 0 {
			t.Fatalf("FinishRunsFenced under %s (not held) wrote: %d jobs locked (want 2), %d runs finished, %d outputs", b, locked, finished, outputs)
		}
	}
	done, err := st.FinishRunsFenced(ctx, tok, reqs)
	if err != nil || !done[0] || !done[1] {
		t.Fatalf("FinishRunsFenced under the lease = %v, %v", done, err)
	}
	var succeeded, outputs int
	if err := st.DB().QueryRowContext(ctx, `SELECT (SELECT count(*) FROM `+prefix+`_runs WHERE outcome = 'succeeded'),
	(SELECT count(*) FROM `+prefix+`_run_output)`).Scan(&succeeded, &outputs); err != nil {
		t.Fatal(err)
	}
	if locked, _ := state(); locked != 0 || succeeded != 2 || outputs != 2 {
		t.Fatalf("after FinishRunsFenced under the lease: %d jobs locked, %d runs succeeded, %d outputs", locked, succeeded, outputs)
	}
}

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
	every := sqlease.Schedule{Every: time.Minute}
	ids := createJobs(t, st, sqlease.Job{Name: "a", MissedRuns: sqlease.RunAll, Schedule: every}, sqlease.Job{Name: "b", MissedRuns: sqlease.RunAll, Schedule: every})
	if _, err := st.DB().ExecContext(ctx, `UPDATE `+prefix+`_jobs SET next_run_at = clock_timestamp() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	tok, bad := leaderTokens(t, st)
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
	for _, b := range bad {
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
