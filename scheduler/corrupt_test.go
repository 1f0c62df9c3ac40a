package scheduler_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlite"
	"github.com/sqlease/sqlease/sqlstore"
)

// corruptAmongDue creates the due one-off jobs good-0..good-(n-1) and one,
// "bad", whose schedule no reader can decode (a row edited by hand), all
// with a lock_timeout of an hour, so that nothing runs by waiting for it.
func corruptAmongDue(t *testing.T, s *scheduler.Scheduler, st *sqlstore.Store, n int) {
	t.Helper()
	ctx := context.Background()
	jobs := []sqlease.Job{{Name: "bad", LockTimeout: time.Hour}}
	for i := range n {
		jobs = append(jobs, sqlease.Job{Name: fmt.Sprintf("good-%d", i), LockTimeout: time.Hour})
	}
	for _, j := range jobs {
		if _, _, err := s.Create(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.DB().ExecContext(ctx, `UPDATE sqlease_jobs SET schedule = 'not json' WHERE name = 'bad'`); err != nil {
		t.Fatal(err)
	}
}

// corruptCount is an Observer that counts the rows set aside.
type corruptCount struct{ n atomic.Int32 }

func (*corruptCount) RunFinished(string, sqlease.Outcome, time.Duration) {}
func (c *corruptCount) JobRowCorrupt(job string) {
	if job == "bad" {
		c.n.Add(1)
	}
}

// A row that cannot be decoded is claimed with the others of its batch: it
// must not hold them up. Each good job runs once, at once, in claim mode
// (under a worker lease, as the daemon runs it) and in leader mode; the
// bad row is left locked, to be tried again after its lock_timeout.
func TestCorruptRowDoesNotHoldUpItsBatch(t *testing.T) {
	const good = 5
	check := func(t *testing.T, st *sqlstore.Store, rec *recorder, obs *corruptCount) {
		waitFor(t, 10*time.Second, "every good job to run", func() bool { return rec.count() >= good })
		time.Sleep(100 * time.Millisecond) // a second run of one would come now
		seen := map[string]int{}
		for _, r := range rec.snapshot() {
			seen[r.Job]++
		}
		for i := range good {
			if n := seen[fmt.Sprintf("good-%d", i)]; n != 1 {
				t.Errorf("good-%d ran %d times, want 1", i, n)
			}
		}
		if seen["bad"] != 0 {
			t.Errorf("the row that cannot be decoded ran")
		}
		// Set aside: unlocked, not due for a while, and not claimed
		// again meanwhile (once: lock epoch 1).
		ctx := context.Background()
		var locked, aside bool
		var epoch int64
		if err := st.DB().QueryRowContext(ctx, `SELECT locked_by IS NOT NULL, not_before IS NOT NULL, lock_epoch FROM sqlease_jobs WHERE name = 'bad'`).Scan(&locked, &aside, &epoch); err != nil {
			t.Fatal(err)
		}
		if locked || !aside || epoch != 1 {
			t.Errorf("the bad row: locked %v, not_before set %v, lock epoch %d; want it set aside once: unlocked, not_before set, epoch 1", locked, aside, epoch)
		}
		if n := obs.n.Load(); n != 1 {
			t.Errorf("the observer heard of the bad row %d times, want 1", n)
		}
		// A run its claim started is closed, and says why.
		runs, err := st.Runs(ctx, "bad", 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if r.Outcome != sqlease.OutcomeAbandoned || !strings.Contains(r.Error, "cannot be decoded") {
				t.Errorf("run %d of the bad row: %s %q, want abandoned, saying why", r.Attempt, r.Outcome, r.Error)
			}
		}
	}
	leads := func(t *testing.T, st *sqlstore.Store) {
		rec, obs := &recorder{}, &corruptCount{}
		s := newSched(t, scheduler.Config{Store: st, Handler: rec.handle, Observer: obs})
		corruptAmongDue(t, s, st, good)
		e := lead(t, st, &s, "leader")
		waitFor(t, 10*time.Second, "leadership", e.IsLeader)
		check(t, st, rec, obs)
	}
	t.Run("claim", func(t *testing.T) {
		dialects(t, func(t *testing.T, newStore func(*testing.T) *sqlstore.Store) {
			st := newStore(t)
			rec, obs := &recorder{}, &corruptCount{}
			s := newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: rec.handle, Observer: obs})
			corruptAmongDue(t, s, st, good)
			workUnderLease(t, s, st, "w")
			check(t, st, rec, obs)
		})
	})
	t.Run("leader", func(t *testing.T) {
		dialects(t, func(t *testing.T, newStore func(*testing.T) *sqlstore.Store) { leads(t, newStore(t)) })
	})
	// A store without batch statements (SQL Server's way): the leader
	// claims one job per fenced transaction.
	t.Run("leader/unbatched", func(t *testing.T) {
		d, err := sqlite.Dialect("sqlease")
		if err != nil {
			t.Fatal(err)
		}
		q := &d.Jobs
		q.ClaimJobs, q.ClaimLockJobs, q.ClaimStartJobs, q.ClaimStart, q.ClaimStartAfter = "", "", "", "", ""
		q.StartRuns, q.FinishRuns, q.StartRunIf = "", "", ""
		path := filepath.Join(t.TempDir(), "u.db")
		st, err := sqlstore.OpenMigrated(context.Background(), func() (*sql.DB, error) { return sqlite.Open(path) }, d)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.DB().Close() })
		if st.Batched() {
			t.Fatal("the store still batches: the test would not take the one-job path")
		}
		leads(t, st)
	})
}
