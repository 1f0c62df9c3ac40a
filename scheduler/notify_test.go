package scheduler_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/pgtest"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/scheduler"
)

// With PostgreSQL's change feed the leader needs no periodic refresh: a job
// created through another node runs within about one RefreshInterval,
// although the fallback refresh is an hour away.
func TestLeaderRefreshesOnNotification(t *testing.T) {
	url := os.Getenv("SQLEASE_TEST_POSTGRES_URL")
	if url == "" {
		t.Skip("SQLEASE_TEST_POSTGRES_URL is not set: bash scripts/test.sh sets it")
	}
	ctx := context.Background()
	dbURL := pgtest.CreateDatabase(t, url)
	st, err := postgres.OpenStore(ctx, dbURL, "sqlease")
	if err != nil {
		t.Fatal(err)
	}
	defer st.DB().Close()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changes, err := postgres.ListenJobs(lctx, dbURL, "sqlease", nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	s := newSched(t, scheduler.Config{Store: st, Handler: rec.handle, Changes: changes,
		RefreshInterval: 50 * time.Millisecond, FallbackRefresh: time.Hour, ScheduleHorizon: 4 * time.Hour})
	e := lead(t, st, &s, "leader")
	waitFor(t, 10*time.Second, "leadership", e.IsLeader)
	time.Sleep(200 * time.Millisecond) // past the first refreshes

	other, err := postgres.OpenStore(ctx, dbURL, "sqlease")
	if err != nil {
		t.Fatal(err)
	}
	defer other.DB().Close()
	follower := newSched(t, scheduler.Config{Store: other})
	created := time.Now()
	if _, _, err := follower.Create(ctx, sqlease.Job{Name: "notified"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the leader to run the job", func() bool { return rec.count() == 1 })
	t.Logf("ran %s after creation on another node (fallback refresh: 1h)", time.Since(created))
}
