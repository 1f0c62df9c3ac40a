package scheduler_test

import (
	"context"
	"errors"
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

// One run's trouble stays that run's (issue 10): deleting a job while it
// runs costs the leader nothing — its term and the other running jobs go
// on — and the deleted job's run row is closed, not left running.
func TestDeletingARunningJobCostsNoLeadership(t *testing.T) {
	dialects(t, func(t *testing.T, newStore func(*testing.T) *sqlstore.Store) {
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
		waitFor(t, 10*time.Second, "leadership", e.IsLeader)
		tok, _ := e.Require(ctx)
		if _, _, err := s.Create(ctx, sqlease.Job{Name: "doomed"}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Create(ctx, sqlease.Job{Name: "steady", Schedule: sqlease.Schedule{Every: 100 * time.Millisecond}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "doomed to run", func() bool {
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
		waitFor(t, 10*time.Second, "the other job to keep running", func() bool { return others.Load() > before+3 })
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
	dialects(t, func(t *testing.T, newStore func(*testing.T) *sqlstore.Store) {
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
		waitFor(t, 10*time.Second, "leadership", e.IsLeader)
		waitFor(t, 10*time.Second, "every outcome written", func() bool {
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
	admin := newSched(t, scheduler.Config{Store: st, Holder: "admin"})
	if _, _, err := admin.Create(ctx, sqlease.Job{Name: "long", LockTimeout: lockTimeout}); err != nil {
		t.Fatal(err)
	}
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
