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

// With the change feed a claim-mode worker claims a job when it falls due,
// not at its next poll (an hour away here), and never before: a job created
// on another node for a later instant runs at that instant, and so does
// the one after it (learnt after the first claim, without a change).
func TestClaimWakesWhenDue(t *testing.T) {
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
	type call struct {
		job string
		at  time.Time
		due time.Time
	}
	calls := make(chan call, 4)
	rec := &recorder{fn: func(_ context.Context, r sqlease.Run) error {
		calls <- call{r.Job, time.Now(), r.ScheduledFor}
		return nil
	}}
	s := newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: rec.handle, Changes: changes, PollInterval: time.Hour})
	defer runClaim(t, s)()
	time.Sleep(300 * time.Millisecond) // past the first (empty) claim

	other, err := postgres.OpenStore(ctx, dbURL, "sqlease")
	if err != nil {
		t.Fatal(err)
	}
	defer other.DB().Close()
	api := newSched(t, scheduler.Config{Store: other})
	now, err := other.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, second := now.Add(700*time.Millisecond), now.Add(1500*time.Millisecond)
	for name, at := range map[string]time.Time{"first": first, "second": second} {
		if _, _, err := api.Create(ctx, sqlease.Job{Name: name, Schedule: sqlease.Schedule{At: at}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"first", "second"} {
		select {
		case c := <-calls:
			if c.job != want {
				t.Fatalf("%s ran, want %s next", c.job, want)
			}
			// The server shares this machine's clock: claimed once due,
			// and long before the next poll.
			if lag := c.at.Sub(c.due); lag < 0 || lag > 5*time.Second {
				t.Errorf("%s ran %s after its occurrence; want within seconds and never before (poll: 1h)", c.job, lag)
			}
			t.Logf("%s ran %s after it fell due", c.job, c.at.Sub(c.due))
		case <-time.After(15 * time.Second):
			t.Fatalf("%s did not run within 15s (poll interval 1h)", want)
		}
	}
}
