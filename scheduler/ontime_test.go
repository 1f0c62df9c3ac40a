package scheduler_test

import (
	"context"
	"database/sql"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
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
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
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
		dbtest.WaitFor(t, 30*time.Second, "the 20 occurrences behind (poll interval 1h)", func() bool { return rec.count() >= 20 })
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
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		admin := newSched(t, scheduler.Config{Store: st})
		if _, _, err := admin.Create(ctx, sqlease.Job{Name: "tick", Schedule: sqlease.Schedule{Every: 200 * time.Millisecond}}); err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		stop := runClaim(t, newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: rec.handle, PollInterval: time.Hour}))
		dbtest.WaitFor(t, 30*time.Second, "5 runs", func() bool { return rec.count() >= 5 })
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
	st := dbtest.SQLite(t)
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
	ctx := context.Background()
	st, other, changes := feedStores(t)
	rec := &recorder{}
	s := newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: rec.handle, Changes: changes, PollInterval: time.Hour})
	defer runClaim(t, s)()
	time.Sleep(300 * time.Millisecond) // past the first (empty) claim

	api := newSched(t, scheduler.Config{Store: other})
	if _, _, err := api.Create(ctx, sqlease.Job{Name: "elsewhere"}); err != nil {
		t.Fatal(err)
	}
	rec.first(t, "elsewhere")
}

// feedStores opens, on a PostgreSQL database of its own, the store of the
// node under test, its change feed (postgres.ListenJobs) and the store of
// another node, all closed when the test ends. It skips the test when
// SQLEASE_TEST_POSTGRES_URL is not set.
func feedStores(t *testing.T) (st, other *sqlstore.Store, changes <-chan struct{}) {
	t.Helper()
	dbURL := dbtest.PostgresURL(t)
	st, other = dbtest.OpenPostgres(t, dbURL), dbtest.OpenPostgres(t, dbURL)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	changes, err := postgres.ListenJobs(ctx, dbURL, "sqlease", nil)
	if err != nil {
		t.Fatal(err)
	}
	return st, other, changes
}

// With PostgreSQL's change feed the leader needs no periodic refresh: a job
// created through another node runs within about one RefreshInterval,
// although the fallback refresh is an hour away.
func TestLeaderRefreshesOnNotification(t *testing.T) {
	ctx := context.Background()
	st, other, changes := feedStores(t)
	rec := &recorder{}
	s := newSched(t, scheduler.Config{Store: st, Handler: rec.handle, Changes: changes,
		RefreshInterval: 50 * time.Millisecond, FallbackRefresh: time.Hour, ScheduleHorizon: 4 * time.Hour})
	e := lead(t, st, &s, "leader")
	dbtest.WaitFor(t, 10*time.Second, "leadership", e.IsLeader)
	time.Sleep(200 * time.Millisecond) // past the first refreshes

	follower := newSched(t, scheduler.Config{Store: other})
	created := time.Now()
	if _, _, err := follower.Create(ctx, sqlease.Job{Name: "notified"}); err != nil {
		t.Fatal(err)
	}
	dbtest.WaitFor(t, 5*time.Second, "the leader to run the job", func() bool { return rec.count() == 1 })
	t.Logf("ran %s after creation on another node (fallback refresh: 1h)", time.Since(created))
}

// With the change feed a claim-mode worker claims a job when it falls due,
// not at its next poll (an hour away here), and never before: a job created
// on another node for a later instant runs at that instant, and so does
// the one after it (learnt after the first claim, without a change).
func TestClaimWakesWhenDue(t *testing.T) {
	ctx := context.Background()
	st, other, changes := feedStores(t)
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

// countingGate is the gate of a held lease that counts its fenced
// transactions and tells whose leases it holds (the store's), so that the
// leader's statements may fence themselves.
type countingGate struct {
	settledGate // settled: zero, no earlier term acts
	fenced      atomic.Int64
}

func (g *countingGate) Fenced(ctx context.Context, tok sqlease.Token, fn func(*sql.Tx) error) error {
	g.fenced.Add(1)
	return g.st.Fenced(ctx, tok, fn)
}

func (g *countingGate) LeaseStore() sqlease.LeaseStore { return g.st }

// TestLeaderDrainsBacklogBySelfFencedStatements: on PostgreSQL a leader
// drains a run_all job that fell behind — each occurrence a claim, a
// start and a finish in turn — by statements that fence themselves, with
// no fenced transaction per occurrence (before, each start was one: five
// round trips), and with no refresh in between (its next occurrence is
// scheduled from its finish); each occurrence once, in order, under the
// lease's epoch.
func TestLeaderDrainsBacklogBySelfFencedStatements(t *testing.T) {
	ctx := context.Background()
	st := dbtest.Postgres(t)
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
	gate := &countingGate{settledGate: settledGate{st: st, tok: lease.Token()}}
	rec := &recorder{}
	// No refresh within the test: only finishes schedule the next
	// occurrence.
	s := newSched(t, scheduler.Config{Store: st, Holder: "leader", Handler: rec.handle, RefreshInterval: time.Hour})
	leadTerm(t, s, gate, gate.tok)
	dbtest.WaitFor(t, 20*time.Second, "the backlog to drain", func() bool { return rec.count() >= behind })
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
