package scheduler_test

import (
	"context"
	"database/sql"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/pgtest"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// countingGate is the gate of a held lease that counts its fenced
// transactions and tells whose leases it holds (the store's), so that the
// leader's statements may fence themselves.
type countingGate struct {
	st     *sqlstore.Store
	tok    sqlease.Token
	fenced atomic.Int64
}

func (g *countingGate) Ensure(tok sqlease.Token) error {
	if tok != g.tok {
		return sqlease.ErrNotLeader
	}
	return nil
}

func (g *countingGate) Fenced(ctx context.Context, tok sqlease.Token, fn func(*sql.Tx) error) error {
	g.fenced.Add(1)
	return g.st.Fenced(ctx, tok, fn)
}

func (g *countingGate) PriorTermsEnd(sqlease.Token) time.Time { return time.Time{} }

func (g *countingGate) LeaseStore() sqlease.LeaseStore { return g.st }

// TestLeaderDrainsBacklogBySelfFencedStatements: on PostgreSQL a leader
// drains a run_all job that fell behind — each occurrence a claim, a
// start and a finish in turn — by statements that fence themselves, with
// no fenced transaction per occurrence (before, each start was one: five
// round trips), and with no refresh in between (its next occurrence is
// scheduled from its finish); each occurrence once, in order, under the
// lease's epoch.
func TestLeaderDrainsBacklogBySelfFencedStatements(t *testing.T) {
	url := os.Getenv("SQLEASE_TEST_POSTGRES_URL")
	if url == "" {
		t.Skip("SQLEASE_TEST_POSTGRES_URL not set; bash scripts/test.sh sets it")
	}
	ctx := context.Background()
	st, err := postgres.OpenStore(ctx, pgtest.CreateDatabase(t, url), "sqlease")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.DB().Close() })
	admin := newSched(t, scheduler.Config{Store: st, Holder: "admin"})
	const behind = 40
	if _, _, err := admin.Create(ctx, sqlease.Job{Name: "behind", MissedRuns: sqlease.RunAll,
		Schedule: sqlease.Schedule{Every: scheduler.MinEvery}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx, `UPDATE sqlease_jobs SET next_run_at = clock_timestamp() - $1::bigint * interval '1 millisecond'`,
		(behind * scheduler.MinEvery).Milliseconds()); err != nil {
		t.Fatal(err)
	}
	lease, err := st.Acquire(ctx, "lead", "leader", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	gate := &countingGate{st: st, tok: lease.Token()}
	rec := &recorder{}
	// No refresh within the test: only finishes schedule the next
	// occurrence.
	s := newSched(t, scheduler.Config{Store: st, Holder: "leader", Handler: rec.handle, RefreshInterval: time.Hour})
	leadTerm(t, s, gate, gate.tok)
	waitFor(t, 20*time.Second, "the backlog to drain", func() bool { return rec.count() >= behind })
	// Counted while the term runs: its end (a run cut short, its claim
	// given back) writes in fenced transactions.
	fenced := gate.fenced.Load()
	runs := rec.snapshot()
	for i, r := range runs {
		if r.Attempt != 1 || r.Epoch != gate.tok.Epoch {
			t.Fatalf("run %d: attempt %d epoch %d, want 1 and %d", i, r.Attempt, r.Epoch, gate.tok.Epoch)
		}
		if i > 0 && !r.ScheduledFor.Equal(runs[i-1].ScheduledFor.Add(scheduler.MinEvery)) {
			t.Fatalf("run %d is for %s after %s: not the next occurrence", i, r.ScheduledFor, runs[i-1].ScheduledFor)
		}
	}
	// A few fenced transactions are fine (a claim that found nothing asks
	// one why); one per occurrence is the path this test guards against.
	if fenced >= int64(len(runs))/4 {
		t.Fatalf("%d fenced transactions for %d occurrences: the starts are not self-fenced", fenced, len(runs))
	}
}
