package scheduler_test

import (
	"context"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/pgtest"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// The tests of on-time claims (ontime.go) set the poll interval to an hour:
// a worker that waited for its next poll would run nothing more within the
// test, so each fails without the wake-up it checks. They assert what ran,
// never how fast.

// A run_all job that fell behind drains its backlog without waiting for a
// poll between occurrences: the finish of one occurrence leaves the job
// due, and the worker claims the next at once — one at a time (the
// occurrences of a job never overlap), in order, each once.
func TestClaimDrainsBacklogWithoutPolling(t *testing.T) {
	dialects(t, func(t *testing.T, newStore func(*testing.T) *sqlstore.Store) {
		ctx := context.Background()
		st := newStore(t)
		admin := newSched(t, scheduler.Config{Store: st})
		if _, _, err := admin.Create(ctx, sqlease.Job{Name: "behind", MissedRuns: sqlease.RunAll, Schedule: sqlease.Schedule{Every: 100 * time.Millisecond}}); err != nil {
			t.Fatal(err)
		}
		// Nobody ran it for 2 s: 20 occurrences are due.
		now, err := st.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.DB().Exec(`UPDATE sqlease_jobs SET next_run_at = `+placeholder(st), timeParam(st, now.Add(-2*time.Second))); err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		stop := runClaim(t, newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: rec.handle, PollInterval: time.Hour}))
		waitFor(t, 30*time.Second, "the 20 occurrences behind (poll interval 1h)", func() bool { return rec.count() >= 20 })
		stop()
		var sf []time.Time
		for _, r := range rec.snapshot() {
			sf = append(sf, r.ScheduledFor)
		}
		if !sort.SliceIsSorted(sf, func(i, j int) bool { return sf[i].Before(sf[j]) }) {
			t.Errorf("occurrences ran out of order: %v", sf)
		}
		for i := 1; i < len(sf); i++ {
			if !sf[i].After(sf[i-1]) {
				t.Errorf("occurrence %s ran twice", sf[i])
			}
		}
	})
}

// A periodic job runs at each occurrence, learnt from the finish of the
// one before (no change feed, no poll within the test), and never before
// its time.
func TestClaimPeriodicOnTimeWithoutPolling(t *testing.T) {
	dialects(t, func(t *testing.T, newStore func(*testing.T) *sqlstore.Store) {
		ctx := context.Background()
		st := newStore(t)
		admin := newSched(t, scheduler.Config{Store: st})
		if _, _, err := admin.Create(ctx, sqlease.Job{Name: "tick", Schedule: sqlease.Schedule{Every: 200 * time.Millisecond}}); err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		stop := runClaim(t, newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: rec.handle, PollInterval: time.Hour}))
		waitFor(t, 30*time.Second, "5 runs", func() bool { return rec.count() >= 5 })
		stop()
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for i, r := range rec.runs {
			// Database and handler share this machine's clock.
			if rec.at[i].Before(r.ScheduledFor) {
				t.Errorf("%s ran %s before its occurrence", r.Job, r.ScheduledFor.Sub(rec.at[i]))
			}
		}
	})
}

// A job created through the worker's own Scheduler (the daemon's API on
// the node) for a later instant runs at that instant, without a change
// feed (SQLite) and although the worker's next poll is an hour away.
func TestClaimWakesForOwnCreate(t *testing.T) {
	ctx := context.Background()
	st := sqliteStore(t)
	rec := &recorder{}
	s := newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: rec.handle, PollInterval: time.Hour})
	defer runClaim(t, s)()
	time.Sleep(200 * time.Millisecond) // past the first (empty) claim
	now, err := st.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create(ctx, sqlease.Job{Name: "later", Schedule: sqlease.Schedule{At: now.Add(300 * time.Millisecond)}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create(ctx, sqlease.Job{Name: "now"}); err != nil {
		t.Fatal(err)
	}
	r, at := rec.first(t, "now")
	if at.Before(r.ScheduledFor) {
		t.Errorf("now ran %s before its occurrence", r.ScheduledFor.Sub(at))
	}
	r, at = rec.first(t, "later")
	if at.Before(r.ScheduledFor) {
		t.Errorf("later ran %s before its occurrence", r.ScheduledFor.Sub(at))
	}
}

// On PostgreSQL a job created through another node, due at once, wakes a
// claim-mode worker through the change feed: it claims at once, not at its
// next poll (an hour away).
func TestClaimWakesOnFeedForDueJob(t *testing.T) {
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
	s := newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: rec.handle, Changes: changes, PollInterval: time.Hour})
	defer runClaim(t, s)()
	time.Sleep(300 * time.Millisecond) // past the first (empty) claim

	other, err := postgres.OpenStore(ctx, dbURL, "sqlease")
	if err != nil {
		t.Fatal(err)
	}
	defer other.DB().Close()
	api := newSched(t, scheduler.Config{Store: other})
	if _, _, err := api.Create(ctx, sqlease.Job{Name: "elsewhere"}); err != nil {
		t.Fatal(err)
	}
	rec.first(t, "elsewhere")
}
