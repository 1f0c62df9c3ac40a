package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// TestBadErrorTextRunsNothingTwice is fault issue 10's report in claim mode:
// one run's error text that a database refuses as it is (a NUL byte, bytes
// that are not UTF-8, a huge stderr) failed the grouped finish of every run
// that ended with it on PostgreSQL, and those that had succeeded ran again
// once their locks went stale. Here all runs end together, so they share
// one group; each is recorded once, and nothing runs twice.
func TestBadErrorTextRunsNothingTwice(t *testing.T) {
	dialects(t, func(t *testing.T, newStore func(*testing.T) *sqlstore.Store) {
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
			waitFor(t, 15*time.Second, "the outcome of "+name, func() bool {
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
