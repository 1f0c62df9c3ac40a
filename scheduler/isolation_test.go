package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
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
