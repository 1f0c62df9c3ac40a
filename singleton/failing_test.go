package singleton_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/singleton"
	"github.com/sqlease/sqlease/sqlstore"
)

// A body that fails at once, start after start, makes the singleton
// failing for the whole fleet — its row says why (last_error) and counts
// the failed starts — and restarts counts the starts after the first. A
// run that lasts clears it (in database time), and the first start of a
// healthy singleton is no restart. A graceful stop is no failure.
func TestCrashLoopIsFailingWithItsError(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		st := newStore(t)
		var starts atomic.Int32
		var healthy atomic.Bool
		n := newNode(t, st, "a", func(n *singleton.Node) {
			if err := singleton.Register(n, singleton.Config[v1]{Name: "crashy",
				Body: func(ctx context.Context, in *singleton.Instance[v1]) error {
					k := starts.Add(1)
					if !healthy.Load() {
						return fmt.Errorf("exit status 127: crashy: command not found (start %d)", k)
					}
					<-ctx.Done()
					return nil
				}}); err != nil {
				t.Fatal(err)
			}
			if err := singleton.Register(n, singleton.Config[v1]{Name: "fine",
				Body: func(ctx context.Context, in *singleton.Instance[v1]) error { <-ctx.Done(); return nil }}); err != nil {
				t.Fatal(err)
			}
		})
		ctx := context.Background()
		status := func(name string) (sqlstore.SingletonRow, string) {
			row, err := st.Singleton(ctx, name)
			if errors.Is(err, sqlease.ErrNoJob) {
				return row, "" // the node has not created its row yet
			}
			if err != nil {
				t.Fatal(err)
			}
			l, err := st.Lease(ctx, singleton.MemberPrefix+row.Node)
			if err != nil && !errors.Is(err, sqlease.ErrNoLease) {
				t.Fatal(err)
			}
			return row, singleton.FleetStatus(row, l, time.Minute)
		}
		var row sqlstore.SingletonRow
		dbtest.WaitFor(t, 20*time.Second, "crashy to be failing", func() bool {
			var s string
			row, s = status("crashy")
			return s == singleton.StatusFailing
		})
		if row.Failures < singleton.FailingStarts || row.LastError == "" || row.LastErrorAt.IsZero() {
			t.Fatalf("failing row: %+v", row)
		}
		if !strings.HasPrefix(row.LastError, "exit status 127: crashy: command not found (start ") {
			t.Fatalf("last_error %q, want the body's error", row.LastError)
		}
		if row.Restarts != row.Failures-1 && row.Restarts != row.Failures {
			t.Fatalf("restarts %d after %d failed starts (the first start is no restart)", row.Restarts, row.Failures)
		}
		if fine, s := status("fine"); fine.Restarts != 0 || s == singleton.StatusFailing || fine.LastError != "" {
			t.Fatalf("a singleton started once: restarts %d, status %s, last_error %q", fine.Restarts, s, fine.LastError)
		}

		// It recovers: a run that lasts FailedStartWithin (database time)
		// is no longer failing. Checked on the row, its clock moved on.
		healthy.Store(true)
		dbtest.WaitFor(t, 40*time.Second, "a run after the failures", func() bool {
			row, _ = status("crashy")
			return row.StartedAt.After(row.LastErrorAt)
		})
		if !singleton.Failing(row) {
			t.Fatalf("not failing right after a restart that has not lasted yet: %+v", row)
		}
		row.Now = row.StartedAt.Add(singleton.FailedStartWithin)
		if singleton.Failing(row) {
			t.Fatalf("still failing after a run that lasted %s: %+v", singleton.FailedStartWithin, row)
		}
		n.stop() // a graceful stop records nothing
		after, _ := status("crashy")
		if after.LastErrorAt != row.LastErrorAt || after.Failures != row.Failures {
			t.Fatalf("the graceful stop was recorded as an end: %+v, was %+v", after, row)
		}
	})
}
