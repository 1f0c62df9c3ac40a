package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/scheduler"
)

// Seed 004's abandonment, with a margin (fault issue 10, item 9): a
// claim-mode run whose database stops answering is cancelled, and refused
// by Ensure, while its lock still has at least half the margin
// (lock_timeout/4) to live in database time — not after HeartbeatFailures
// beats of lock_timeout/4 each, about when another worker may reclaim it.

const (
	hangLockTimeout = 2 * time.Second
	hangMargin      = hangLockTimeout / 4 // scheduler's lockMargin
)

type runCancel struct {
	at      time.Time // local
	ensured error     // scheduler.Ensure at that moment
}

// cancelWatcher is a handler that reports its run's start and, once its
// context ends, the moment and what Ensure said.
func cancelWatcher(started chan<- time.Time, cancelled chan<- runCancel) scheduler.Handler {
	return func(ctx context.Context, r sqlease.Run) error {
		started <- time.Now()
		<-ctx.Done()
		cancelled <- runCancel{time.Now(), scheduler.Ensure(ctx)}
		return ctx.Err()
	}
}

func recv[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("no %s within %s", what, d)
		panic("unreachable")
	}
}

// The worker's database connection hangs (an in-process proxy drops
// everything it sends): its heartbeats neither fail nor succeed.
func TestHangingDatabaseCancelsBeforeReclaim(t *testing.T) {
	ctx := context.Background()
	dbURL := dbtest.PostgresURL(t)
	direct := dbtest.OpenPostgres(t, dbURL)
	host := dbURL[strings.Index(dbURL, "@")+1:]
	upstream := host[:strings.Index(host, "/")]
	proxy := toxiproxy.NewProxy(toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()), "pg", "127.0.0.1:0", upstream)
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Stop)
	viaProxy := dbtest.OpenPostgres(t, strings.Replace(dbURL, upstream, proxy.Listen, 1))

	admin := newSched(t, scheduler.Config{Store: direct, Holder: "admin"})
	if _, _, err := admin.Create(ctx, sqlease.Job{Name: "send", LockTimeout: hangLockTimeout, Retry: sqlease.Retry{MaxAttempts: 3}}); err != nil {
		t.Fatal(err)
	}
	started, cancelled := make(chan time.Time, 4), make(chan runCancel, 4)
	runClaim(t, newSched(t, scheduler.Config{Store: viaProxy, Holder: "w1", Handler: cancelWatcher(started, cancelled)}))
	recv(t, started, 15*time.Second, "start of the run")

	if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(`{"name":"hang","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`)); err != nil {
		t.Fatal(err)
	}
	// Before the worker's cleanup: its finish and claims then return.
	t.Cleanup(func() { _ = proxy.Toxics.RemoveToxic(context.Background(), "hang") })
	// Another worker, whose database answers, waits to reclaim the job.
	reclaimed := make(chan time.Time, 4)
	runClaim(t, newSched(t, scheduler.Config{Store: direct, Holder: "w2", Handler: func(ctx context.Context, r sqlease.Run) error {
		reclaimed <- time.Now()
		return nil
	}}))

	c := recv(t, cancelled, 15*time.Second, "cancellation of the hanging run")
	j, err := direct.Job(ctx, "send")
	if err != nil {
		t.Fatal(err)
	}
	now, err := direct.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if j.LockedBy != "w1" {
		t.Fatalf("the job was reclaimed by %q before the hanging run was cancelled", j.LockedBy)
	}
	spare := j.LockedAt.Add(hangLockTimeout).Sub(now)
	t.Logf("cancelled %s before the lock could go stale (lock_timeout %s, margin %s)", spare, hangLockTimeout, hangMargin)
	if spare < hangMargin/2 {
		t.Errorf("cancelled %s before the lock could go stale, want at least margin/2 = %s", spare, hangMargin/2)
	}
	if c.ensured == nil {
		t.Error("Ensure passed in the cancelled run")
	}
	if at := recv(t, reclaimed, 15*time.Second, "reclaim by the other worker"); !at.After(c.at) {
		t.Errorf("the other worker's run started %s before the hanging run was cancelled", c.at.Sub(at))
	}
}

// A start that is slow (here a trigger sleeps in the run's insert) is time
// the lock no longer has: the lock was taken by the claim, so the run's
// local deadline counts from the claim's send time, not from the run's
// start. From the start, a run whose heartbeats then hang trusted its lock
// past the moment it could go stale.
func TestSlowStartCountsAgainstTheLock(t *testing.T) {
	ctx := context.Background()
	st := dbtest.Postgres(t)
	const delay = 1200 * time.Millisecond // of lock_timeout 2 s
	for _, q := range []string{
		`CREATE FUNCTION slow_start() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.attempt = 1 THEN PERFORM pg_sleep(1.2); END IF;
	RETURN NEW;
END $$`,
		`CREATE TRIGGER slow_start BEFORE INSERT ON sqlease_runs FOR EACH ROW EXECUTE FUNCTION slow_start()`,
	} {
		if _, err := st.DB().ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// A recurring job: the claim takes its lock and a separate batch start
	// inserts its run (a one-off job's run starts in the claim statement).
	created(t, st, sqlease.Job{Name: "slow", Schedule: sqlease.Schedule{Every: time.Hour}, LockTimeout: hangLockTimeout,
		Retry: sqlease.Retry{MaxAttempts: 3}})
	started, cancelled := make(chan time.Time, 4), make(chan runCancel, 4)
	runClaim(t, newSched(t, scheduler.Config{Store: st, Holder: "w1", Handler: cancelWatcher(started, cancelled)}))
	recv(t, started, 15*time.Second, "start of the run")
	// From now on its heartbeats wait for this transaction's row lock.
	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT 1 FROM sqlease_jobs WHERE name = 'slow' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	c := recv(t, cancelled, 15*time.Second, "cancellation of the run")
	var now, lockedAt time.Time
	var lockedBy string
	if err := tx.QueryRowContext(ctx, `SELECT clock_timestamp(), locked_at, locked_by FROM sqlease_jobs WHERE name = 'slow'`).Scan(&now, &lockedAt, &lockedBy); err != nil {
		t.Fatal(err)
	}
	spare := lockedAt.Add(hangLockTimeout).Sub(now)
	t.Logf("start delayed %s; cancelled %s before the lock could go stale (margin %s)", delay, spare, hangMargin)
	if lockedBy != "w1" || spare < hangMargin/2 {
		t.Errorf("cancelled %s before the lock (held by %s) could go stale, want at least margin/2 = %s", spare, lockedBy, hangMargin/2)
	}
	if c.ensured == nil {
		t.Error("Ensure passed in the cancelled run")
	}
}
