package scheduler_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlite"
	"github.com/sqlease/sqlease/sqlstore"
)

// One run's trouble stays that run's (issue 10): deleting a job while it
// runs costs the leader nothing — its term and the other running jobs go
// on — and the deleted job's run row is closed, not left running.
func TestDeletingARunningJobCostsNoLeadership(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		release := make(chan struct{})
		var others atomic.Int32
		rec := &recorder{fn: func(ctx context.Context, r sqlease.Run) error {
			if r.Job == "doomed" {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
				return nil
			}
			others.Add(1)
			return nil
		}}
		s := newSched(t, scheduler.Config{Store: st, Handler: rec.handle, RefreshInterval: 50 * time.Millisecond})
		e := lead(t, st, &s, "leader")
		dbtest.WaitFor(t, 10*time.Second, "leadership", e.IsLeader)
		tok, _ := e.Require(ctx)
		if _, _, err := s.Create(ctx, sqlease.Job{Name: "doomed"}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Create(ctx, sqlease.Job{Name: "steady", Schedule: sqlease.Schedule{Every: 100 * time.Millisecond}}); err != nil {
			t.Fatal(err)
		}
		dbtest.WaitFor(t, 10*time.Second, "doomed to run", func() bool {
			for _, r := range rec.snapshot() {
				if r.Job == "doomed" {
					return true
				}
			}
			return false
		})
		if err := s.Delete(ctx, "doomed"); err != nil {
			t.Fatal(err)
		}
		outcome := func() (string, string) {
			var o, e string
			if err := st.DB().QueryRow("SELECT outcome, error FROM sqlease_runs WHERE job_name = "+placeholder(st), "doomed").Scan(&o, &e); err != nil {
				t.Fatal(err)
			}
			return o, e
		}
		if o, e := outcome(); o != string(sqlease.OutcomeAbandoned) || !strings.Contains(e, "deleted") {
			t.Fatalf("the deleted job's run: %s %q, want abandoned as deleted", o, e)
		}
		close(release) // its handler returns; the finish finds no job
		before := others.Load()
		dbtest.WaitFor(t, 10*time.Second, "the other job to keep running", func() bool { return others.Load() > before+3 })
		if cur, err := e.Require(ctx); err != nil || cur != tok {
			t.Fatalf("deleting a running job ended the term: %v %v (was %v)", cur, err, tok)
		}
		if o, e := outcome(); o != string(sqlease.OutcomeAbandoned) {
			t.Fatalf("after the late finish: %s %q", o, e)
		}
	})
}

// Error text with NUL bytes and invalid UTF-8 is stored cleaned, in every
// dialect; in a batch (PostgreSQL) the other runs' outcomes are written too.
func TestRunErrorTextIsCleaned(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		bad := "stderr:\x00 bad \xff\xfe bytes " + strings.Repeat("x", 10000)
		rec := &recorder{fn: func(ctx context.Context, r sqlease.Run) error {
			if r.Job == "bad-0" {
				return errors.New(bad)
			}
			return nil
		}}
		admin := newSched(t, scheduler.Config{Store: st, Holder: "admin"})
		for i := range 8 {
			if _, _, err := admin.Create(ctx, sqlease.Job{Name: fmt.Sprintf("bad-%d", i), Retry: sqlease.Retry{MaxAttempts: 1}}); err != nil {
				t.Fatal(err)
			}
		}
		s := newSched(t, scheduler.Config{Store: st, Handler: rec.handle})
		e := lead(t, st, &s, "leader")
		dbtest.WaitFor(t, 10*time.Second, "leadership", e.IsLeader)
		dbtest.WaitFor(t, 10*time.Second, "every outcome written", func() bool {
			for i := range 8 {
				runs, _ := st.Runs(ctx, fmt.Sprintf("bad-%d", i), 1)
				if len(runs) != 1 || runs[0].Outcome == sqlease.OutcomeRunning {
					return false
				}
			}
			return true
		})
		runs, _ := st.Runs(ctx, "bad-0", 1)
		got := runs[0]
		if got.Outcome != sqlease.OutcomeFailed || strings.ContainsRune(got.Error, 0) || len(got.Error) > sqlstore.MaxTextBytes ||
			!strings.Contains(got.Error, "bad") || !strings.HasSuffix(got.Error, "[truncated]") {
			t.Fatalf("stored error: outcome %s, %d bytes, %q…", got.Outcome, len(got.Error), got.Error[:min(60, len(got.Error))])
		}
		for i := 1; i < 8; i++ {
			runs, _ := st.Runs(ctx, fmt.Sprintf("bad-%d", i), 1)
			if runs[0].Outcome != sqlease.OutcomeSucceeded {
				t.Fatalf("bad-%d: %s", i, runs[0].Outcome)
			}
		}
	})
}

// A claim-mode run whose heartbeats hang (the database holds them) is
// cancelled, and refused by Ensure, before its lock can go stale — not
// after HeartbeatFailures beats of lock_timeout/4 each, at about the moment
// another worker may reclaim the job.
func TestHangingHeartbeatsCancelBeforeTheLockGoesStale(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "jobs.db")
	st, err := sqlite.OpenStore(ctx, path, "sqlease")
	if err != nil {
		t.Fatal(err)
	}
	defer st.DB().Close()
	lockTimeout := 2 * time.Second // cancelled at 1.5 s: half a second of slack on a busy machine
	created(t, st, sqlease.Job{Name: "long", LockTimeout: lockTimeout})
	type outcome struct {
		after   time.Duration
		ensured error
	}
	started := make(chan time.Time, 1)
	cancelled := make(chan outcome, 1)
	s := newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: func(ctx context.Context, r sqlease.Run) error {
		t0 := time.Now()
		started <- t0
		<-ctx.Done()
		cancelled <- outcome{time.Since(t0), scheduler.Ensure(ctx)}
		return ctx.Err()
	}})
	runClaim(t, s)
	<-started
	// Another connection takes the database's write lock: every heartbeat
	// now waits (SQLite's busy wait does not end with the beat's context).
	hold, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	conn, err := hold.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	var got outcome
	select {
	case got = <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the run was not cancelled while its heartbeats hung")
	}
	// In database time (WAL: reads pass the held write lock), the lock
	// must still have at least half the margin (lock_timeout/4) to live.
	j, jerr := st.Job(ctx, "long")
	now, nerr := st.Now(ctx)
	_, _ = conn.ExecContext(ctx, "ROLLBACK")
	if jerr != nil || nerr != nil {
		t.Fatal(jerr, nerr)
	}
	spare := j.LockedAt.Add(lockTimeout).Sub(now)
	t.Logf("cancelled %s after the start, %s before the lock could go stale (lock_timeout %s, heartbeat every %s)", got.after, spare, lockTimeout, lockTimeout/4)
	if margin := lockTimeout / 4; spare < margin/2 {
		t.Fatalf("cancelled %s before the lock could go stale, want at least margin/2 = %s", spare, margin/2)
	}
	if got.ensured == nil {
		t.Fatal("Ensure passed after the run's local deadline")
	}
}

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
		dbtest.WaitFor(t, 10*time.Second, "every good job to run", func() bool { return rec.count() >= good })
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
		dbtest.WaitFor(t, 10*time.Second, "leadership", e.IsLeader)
		check(t, st, rec, obs)
	}
	t.Run("claim", func(t *testing.T) {
		dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
			st := newStore(t)
			rec, obs := &recorder{}, &corruptCount{}
			s := newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: rec.handle, Observer: obs})
			corruptAmongDue(t, s, st, good)
			workUnderLease(t, s, st, "w")
			check(t, st, rec, obs)
		})
	})
	t.Run("leader", func(t *testing.T) {
		dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) { leads(t, newStore(t)) })
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

// TestBadErrorTextRunsNothingTwice is fault issue 10's report in claim mode:
// one run's error text that a database refuses as it is (a NUL byte, bytes
// that are not UTF-8, a huge stderr) failed the grouped finish of every run
// that ended with it on PostgreSQL, and those that had succeeded ran again
// once their locks went stale. Here all runs end together, so they share
// one group; each is recorded once, and nothing runs twice.
func TestBadErrorTextRunsNothingTwice(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		const n = 5
		const lockTimeout = time.Second
		bad := "exit status 1: stderr: \x00\xff\xfe" + strings.Repeat("ошибка ", 2000)
		var started sync.WaitGroup
		started.Add(n)
		all := make(chan struct{})
		go func() { started.Wait(); close(all) }()
		rec := &recorder{fn: func(ctx context.Context, r sqlease.Run) error {
			if r.Attempt == 1 {
				started.Done()
				<-all // finish together: one group
			}
			if r.Job == "job-2" {
				return errors.New(bad)
			}
			return nil
		}}
		s := newSched(t, scheduler.Config{Store: newStore(t), Holder: "w", Handler: rec.handle})
		for i := range n {
			if _, _, err := s.Create(ctx, sqlease.Job{Name: fmt.Sprintf("job-%d", i), Retry: sqlease.Retry{MaxAttempts: 1}, LockTimeout: lockTimeout}); err != nil {
				t.Fatal(err)
			}
		}
		runClaim(t, s)
		for i := range n {
			name := fmt.Sprintf("job-%d", i)
			dbtest.WaitFor(t, 15*time.Second, "the outcome of "+name, func() bool {
				runs, _ := s.Runs(ctx, name, 10)
				return len(runs) == 1 && runs[0].Outcome != sqlease.OutcomeRunning
			})
			runs, _ := s.Runs(ctx, name, 10)
			want := sqlease.OutcomeSucceeded
			if name == "job-2" {
				want = sqlease.OutcomeFailed
				if e := runs[0].Error; e != sqlstore.CleanText(bad) || strings.ContainsRune(e, 0) || !utf8.ValidString(e) || len(e) > sqlstore.MaxTextBytes {
					t.Errorf("stored error text (%d bytes) is not the storable form of the handler's", len(e))
				}
			}
			if runs[0].Outcome != want || runs[0].Attempt != 1 {
				t.Errorf("%s: %+v, want attempt 1 %s", name, runs[0], want)
			}
		}
		// Past the lock timeout, nothing ran again.
		time.Sleep(lockTimeout + 500*time.Millisecond)
		if got := rec.count(); got != n {
			t.Fatalf("%d runs of %d one-off jobs: an unrecorded finish ran its occurrence again", got, n)
		}
	})
}
