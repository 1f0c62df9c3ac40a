package mysql_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// A batch start holds its job's lock until its transaction commits: a
// worker that would reclaim the job (its lock gone stale meanwhile) cannot
// take it in between; it takes the other stale job at once. Claims tell a
// reclaim from a first claim, and read a job's attempt from the ledger.
func TestBatchStartHoldsJobLock(t *testing.T) {
	ctx := t.Context()
	st := newStore(t)
	if !st.Batched() {
		t.Fatal("the MySQL store does not batch")
	}
	admin, err := scheduler.New(scheduler.Config{Store: st, Holder: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if _, _, err := admin.Create(ctx, sqlease.Job{Name: name, LockTimeout: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	claimed, err := st.ClaimDue(ctx, "w1", 2)
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claim: %d jobs, %v", len(claimed), err)
	}
	for _, c := range claimed {
		if c.Reclaimed {
			t.Errorf("the first claim of %s counts as a reclaim", c.Name)
		}
	}
	a, b := claimed[0], claimed[1]
	tx, err := st.DB().BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	ok, err := st.StartRuns(ctx, tx, []sqlstore.StartReq{{Lock: a.Lock, Job: a.Name, ScheduledFor: a.NextRunAt, Attempt: 1}})
	if err != nil || !ok[0] {
		t.Fatalf("batch start: %v, %v", ok, err)
	}
	// Both locks go stale. The wait is a statement of the transaction: the
	// server ends one left idle for a second (idleTransactionLimit).
	if _, err := tx.ExecContext(ctx, `DO SLEEP(1.1)`); err != nil {
		t.Fatal(err)
	}

	// b, in flight and not locked by anyone, is taken over at once; a,
	// whose start has not committed, is left alone.
	again, err := st.ClaimDue(ctx, "w2", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || again[0].ID != b.ID || !again[0].Reclaimed {
		t.Fatalf("reclaim during a's start: %v, want b alone, as a reclaim", names(again))
	}
	// b's lock holder's finish is refused; it did not wait for a claim.
	done, err := st.FinishRuns(ctx, nil, []sqlstore.FinishReq{{Lock: b.Lock, Run: sqlease.Run{JobID: b.ID, Job: b.Name, ScheduledFor: b.NextRunAt, Attempt: 1},
		Finish: sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}}})
	if err != nil || done[0] {
		t.Fatalf("finish of b under its lost lock: %v, %v; want refused", done, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	again, err = st.ClaimDue(ctx, "w2", 2)
	if err != nil || len(again) != 1 || again[0].ID != a.ID || !again[0].Reclaimed || again[0].Attempt != 1 {
		t.Fatalf("reclaim after a's start committed: %v, %v; want a, a reclaim, its attempt 1 from the ledger", names(again), err)
	}
}

func names(cs []sqlstore.Claimed) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}
