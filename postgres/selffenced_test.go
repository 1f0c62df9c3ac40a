package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
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
	sched, err := scheduler.New(scheduler.Config{Store: st, Holder: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, j := range []sqlease.Job{{Name: "once"}, {Name: "twice"}} {
		s, _, err := sched.Create(ctx, j)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
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
	state := func() (locked, runs int) {
		t.Helper()
		if err := st.DB().QueryRowContext(ctx, `SELECT (SELECT count(*) FROM `+prefix+`_jobs WHERE locked_by IS NOT NULL),
	(SELECT count(*) FROM `+prefix+`_runs)`).Scan(&locked, &runs); err != nil {
			t.Fatal(err)
		}
		return locked, runs
	}
	bad := []sqlease.Token{
		{Name: "lead", Holder: "other", Epoch: tok.Epoch},
		{Name: "lead", Holder: "new", Epoch: tok.Epoch + 1},
		{Name: "short", Holder: "new", Epoch: tok.Epoch}, // expired
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
