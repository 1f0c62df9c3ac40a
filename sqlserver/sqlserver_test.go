package sqlserver_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlserver"
	"github.com/sqlease/sqlease/sqlstore"
	"github.com/sqlease/sqlease/storetest"
)

// database is where the conformance suite and the other tests run. Each
// store gets tables of its own, under a random prefix, dropped when the
// test ends.
var database = storetest.Database{
	Env: "SQLEASE_TEST_SQLSERVER_DSN",
	Hint: "no SQL Server runs here, so the T-SQL is only checked statically. To run the conformance suite, " +
		"point it at a database you may create tables in, e.g. SQLEASE_TEST_SQLSERVER_DSN='sqlserver://sa:…@127.0.0.1:1433?database=sqlease_test' " +
		"(Azure SQL: 'sqlserver://srv.database.windows.net?database=db&fedauth=ActiveDirectoryDefault')",
	Tables: storetest.Tables{
		List: `SELECT QUOTENAME(name) FROM sys.tables
WHERE schema_id = SCHEMA_ID() AND LEFT(name, LEN(@p1)) = @p1`,
		Args: func(like string) []any { return []any{like} },
		Drop: "DROP TABLE",
	},
	Open: func(ctx context.Context, dsn, prefix string) (*sqlstore.Store, error) {
		s, err := sqlserver.OpenStore(ctx, dsn, prefix)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sqlserver.Redact(dsn), err)
		}
		return s, nil
	},
}

func databaseDSN(tb testing.TB) string { return database.URL(tb) }

// newStore opens a store on tables under a fresh random prefix.
func newStore(tb testing.TB) *sqlstore.Store { s, _ := database.Store(tb); return s }

// newStoreWithPrefix is newStore, also returning the prefix.
func newStoreWithPrefix(tb testing.TB) (*sqlstore.Store, string) { return database.Store(tb) }

// TestConformance runs the lease conformance suite. SQL Server cannot end a
// fenced transaction left idle (see the package documentation), so the
// suite expects a frozen fence to hold acquirers off until it resumes.
func TestConformance(t *testing.T) {
	databaseDSN(t)
	storetest.Run(t, storetest.Harness{New: func(t *testing.T) *sqlstore.Store { return newStore(t) }, TimeResolution: 100 * time.Nanosecond, AbortsFrozenFence: false})
}

// TestConcurrentMigrate: a fleet starting at once on a fresh database
// migrates it without errors, and the migrations are idempotent, on a real
// server.
func TestConcurrentMigrate(t *testing.T) { database.ConcurrentMigrate(t, sqlserver.Dialect) }

// TestJobStatements runs every job statement at least once on a real
// server, through the store, and checks what comes back.
func TestJobStatements(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	now, err := s.Now(ctx)
	if err != nil {
		t.Fatalf("Now: %v", err)
	}
	if now.Location() != time.UTC || now.Sub(time.Now()).Abs() > time.Hour {
		t.Fatalf("Now = %v, want a UTC time near the host clock", now)
	}

	spec := sqlstore.StoredJob{SpecHash: "h1", Job: sqlease.Job{
		Name: "smoke.every", Key: "key-1", Schedule: sqlease.Schedule{Every: time.Minute},
		MissedRuns: sqlease.RunOnce, Retry: sqlease.Retry{MaxAttempts: 3, Backoff: time.Second},
		LockTimeout: time.Minute, Action: []byte(`{"kind":"noop"}`),
	}}
	due := now.Add(-time.Second).Add(123 * time.Nanosecond).Truncate(100 * time.Nanosecond)
	job, created, err := s.InsertJob(ctx, spec, due)
	if err != nil || !created {
		t.Fatalf("InsertJob = (%+v, %v, %v), want created", job, created, err)
	}
	if job.ID == 0 || job.Name != spec.Name || job.Key != spec.Key || !job.NextRunAt.Equal(due) || job.Paused ||
		job.Retry != spec.Retry || job.LockTimeout != spec.LockTimeout || string(job.Action) != string(spec.Action) {
		t.Fatalf("InsertJob stored %+v, want %+v next %s", job, spec.Job, due)
	}
	if job.CreatedAt.Before(now) || !job.LastModifiedAt.Equal(job.CreatedAt) {
		t.Errorf("created_at %s last_modified_at %s, want equal and not before %s", job.CreatedAt, job.LastModifiedAt, now)
	}
	// A clash on the name, then on the key, returns the existing row.
	for _, j := range []sqlstore.StoredJob{spec, {SpecHash: "h2", Job: sqlease.Job{Name: "smoke.other", Key: "key-1", MissedRuns: sqlease.Skip}}} {
		got, created, err := s.InsertJob(ctx, j, now)
		if err != nil || created || got.ID != job.ID {
			t.Fatalf("InsertJob(%s, key %s) clash = (id %d, %v, %v), want the existing id %d", j.Name, j.Key, got.ID, created, err, job.ID)
		}
	}
	// Jobs without a key do not clash with each other (the key's unique
	// index is filtered).
	for _, name := range []string{"smoke.nokey1", "smoke.nokey2"} {
		got, created, err := s.InsertJob(ctx, sqlstore.StoredJob{SpecHash: "h", Job: sqlease.Job{Name: name, MissedRuns: sqlease.Skip}}, time.Time{})
		if err != nil || !created || got.Key != "" || !got.NextRunAt.IsZero() {
			t.Fatalf("InsertJob(%s) without key = (%+v, %v, %v)", name, got, created, err)
		}
	}
	list, err := s.Jobs(ctx, "", 2)
	if err != nil || len(list) != 2 || list[0].Name != "smoke.every" || list[1].Name != "smoke.nokey1" {
		t.Fatalf("Jobs(\"\", 2) = (%v, %v), want smoke.every, smoke.nokey1", list, err)
	}
	if st, err := s.Stats(ctx); err != nil || st != (sqlstore.JobStats{Total: 3, Due: 1}) {
		t.Errorf("Stats = (%+v, %v), want 3 jobs, 1 due", st, err)
	}
	win, winNow, err := s.DueWindow(ctx, time.Hour, 10)
	if err != nil || len(win) != 1 || win[0].ID != job.ID || !win[0].NextRunAt.Equal(due) || winNow.Before(now) {
		t.Fatalf("DueWindow = (%+v, %s, %v), want job %d at %s", win, winNow, err, job.ID, due)
	}
	ch, err := s.Changed(ctx, job.LastModifiedAt, 0, 10)
	if err != nil || len(ch) != 3 || ch[0].LastModifiedAt.Before(job.LastModifiedAt) {
		t.Fatalf("Changed(%s, 0) = (%+v, %v), want the 3 jobs", job.LastModifiedAt, ch, err)
	}

	// Claim dispatch: one claimer gets the due job, the next none.
	claims, err := s.ClaimDue(ctx, "worker-1", 10)
	if err != nil || len(claims) != 1 {
		t.Fatalf("ClaimDue = (%v, %v), want one claim", claims, err)
	}
	c := claims[0]
	if c.ID != job.ID || c.Lock.Holder != "worker-1" || c.Lock.Epoch != 1 || c.Attempt != 0 || !c.LockedAt.Equal(c.Now) || c.Now.Before(now) {
		t.Fatalf("claim = %+v, want job %d locked by worker-1 epoch 1 attempt 1 at now", c, job.ID)
	}
	if more, err := s.ClaimDue(ctx, "worker-2", 10); err != nil || len(more) != 0 {
		t.Fatalf("second ClaimDue = (%v, %v), want nothing", more, err)
	}
	run, err := s.StartRun(ctx, nil, c.Lock, c.Name, c.NextRunAt, c.Attempt+1, c.Lock.Epoch)
	if err != nil {
		t.Fatalf("StartRun: %v", err)
	}
	if _, err := s.StartRun(ctx, nil, c.Lock, c.Name, c.NextRunAt, c.Attempt+1, c.Lock.Epoch); !errors.Is(err, sqlease.ErrConflict) {
		t.Fatalf("StartRun of the same attempt again = %v, want ErrConflict (unique violation)", err)
	}
	if err := s.Heartbeat(ctx, c.Lock); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	stale := c.Lock
	stale.Epoch++
	if err := s.Heartbeat(ctx, stale); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("Heartbeat under another epoch = %v, want ErrLeaseLost", err)
	}
	next := c.NextRunAt.Add(time.Minute)
	if err := s.FinishRun(ctx, nil, c.Lock, run, sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded, Next: next}); err != nil {
		t.Fatalf("FinishRun: %v", err)
	}
	if err := s.Heartbeat(ctx, c.Lock); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("Heartbeat after FinishRun = %v, want ErrLeaseLost", err)
	}
	after, err := s.Job(ctx, c.Name)
	if err != nil || after.LockedBy != "" || !after.NextRunAt.Equal(next) || after.LastRunAt.IsZero() || after.Attempt != 0 {
		t.Fatalf("job after FinishRun = (%+v, %v), want unlocked, next %s", after, err, next)
	}
	runs, err := s.Runs(ctx, c.Name, 10)
	if err != nil || len(runs) != 1 || runs[0].Outcome != sqlease.OutcomeSucceeded || runs[0].FinishedAt.IsZero() ||
		!runs[0].ScheduledFor.Equal(c.NextRunAt) || runs[0].Holder != "worker-1" {
		t.Fatalf("Runs = (%+v, %v), want one succeeded run of %s", runs, err, c.NextRunAt)
	}

	// Pause, trigger, resume.
	if p, err := s.SetPaused(ctx, c.Name, true, ""); err != nil || !p.Paused {
		t.Fatalf("SetPaused(true) = (%+v, %v)", p, err)
	}
	tr, err := s.Trigger(ctx, c.Name)
	if err != nil || tr.NextRunAt.Before(now) || tr.Attempt != 0 || !tr.LastModifiedAt.Equal(tr.NextRunAt) {
		t.Fatalf("Trigger = (%+v, %v), want next_run_at = last_modified_at = now", tr, err)
	}
	if got, err := s.ClaimDue(ctx, "worker-1", 10); err != nil || len(got) != 0 {
		t.Fatalf("ClaimDue of a paused job = (%v, %v), want nothing", got, err)
	}
	if _, err := s.SetPaused(ctx, c.Name, false, ""); err != nil {
		t.Fatalf("SetPaused(false): %v", err)
	}

	// Leader dispatch: claim inside a fenced transaction, fail with backoff.
	l, err := s.Acquire(ctx, "smoke.leader", "leader-1", time.Minute)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	err = s.Fenced(ctx, l.Token(), func(tx *sql.Tx) error {
		lc, ok, err := s.ClaimJob(ctx, tx, c.ID, l.Token())
		if err != nil || !ok {
			return errors.Join(errors.New("ClaimJob found nothing"), err)
		}
		if lc.Lock.Epoch != 2 || lc.Lock.Holder != "leader-1" {
			return errors.New("ClaimJob lock is not leader-1 at lock epoch 2")
		}
		r, err := s.StartRun(ctx, tx, lc.Lock, lc.Name, lc.NextRunAt, lc.Attempt+1, l.Epoch)
		if err != nil {
			return err
		}
		return s.FinishRun(ctx, tx, lc.Lock, r, sqlstore.Finish{Outcome: sqlease.OutcomeFailed, Error: "boom", Next: lc.NextRunAt, Attempt: lc.Attempt + 1, Backoff: time.Hour})
	})
	if err != nil {
		t.Fatalf("fenced ClaimJob/StartRun/FinishRun: %v", err)
	}
	win, winNow, err = s.DueWindow(ctx, 2*time.Hour, 10)
	if err != nil || len(win) != 1 || win[0].NextRunAt.Before(winNow.Add(59*time.Minute)) {
		t.Fatalf("DueWindow after a failure with 1h backoff = (%+v, %s, %v), want the job not before now + 1h", win, winNow, err)
	}
	if got, err := s.ClaimDue(ctx, "worker-1", 10); err != nil || len(got) != 0 {
		t.Fatalf("ClaimDue during the backoff = (%v, %v), want nothing", got, err)
	}

	// A stale lock is claimable; ReleaseUnrun clears the next run.
	tr, err = s.Trigger(ctx, "smoke.nokey1")
	if err != nil {
		t.Fatalf("Trigger: %v", err)
	}
	first, err := s.ClaimDue(ctx, "worker-1", 10)
	if err != nil || len(first) != 1 || first[0].ID != tr.ID {
		t.Fatalf("ClaimDue = (%v, %v), want smoke.nokey1", first, err)
	}
	// smoke.nokey1 has a lock timeout of 0: its lock is stale at once.
	var second []sqlstore.Claimed
	deadline := time.Now().Add(5 * time.Second)
	for len(second) == 0 && time.Now().Before(deadline) {
		if second, err = s.ClaimDue(ctx, "worker-2", 10); err != nil {
			t.Fatalf("ClaimDue of a stale lock: %v", err)
		}
	}
	if len(second) != 1 || second[0].Lock.Holder != "worker-2" || second[0].Lock.Epoch != first[0].Lock.Epoch+1 {
		t.Fatalf("ClaimDue of a stale lock = %+v, want worker-2 at epoch %d", second, first[0].Lock.Epoch+1)
	}
	if err := s.ReleaseUnrun(ctx, nil, second[0].Lock, time.Time{}, 0); err != nil {
		t.Fatalf("ReleaseUnrun: %v", err)
	}
	if j, err := s.Job(ctx, "smoke.nokey1"); err != nil || !j.NextRunAt.IsZero() || j.LockedBy != "" {
		t.Fatalf("job after ReleaseUnrun = (%+v, %v), want unlocked with no next run", j, err)
	}

	// Both finished runs are older than the database clock's next tick.
	var pruned int64
	for deadline := time.Now().Add(5 * time.Second); pruned < 2 && time.Now().Before(deadline); {
		n, err := s.PruneRuns(ctx, 0)
		if err != nil {
			t.Fatalf("PruneRuns(0): %v", err)
		}
		pruned += n
	}
	if pruned != 2 {
		t.Errorf("PruneRuns(0) removed %d runs, want the 2 finished ones", pruned)
	}
	if err := s.DeleteJob(ctx, "smoke.other"); !errors.Is(err, sqlease.ErrNoJob) {
		t.Errorf("DeleteJob of a missing job = %v, want ErrNoJob", err)
	}
	if err := s.DeleteJob(ctx, c.Name); err != nil {
		t.Errorf("DeleteJob: %v", err)
	}
}

// TestOffline runs the scenarios every dialect shares that need no
// database: invalid prefixes, an empty connection string, Classify of errors
// that are not the driver's.
func TestOffline(t *testing.T) {
	storetest.Offline(t, storetest.Constructors{Dialect: sqlserver.Dialect, New: sqlserver.New, Open: sqlserver.Open, OpenStore: sqlserver.OpenStore,
		Classify: sqlserver.Classify, DSN: "sqlserver://sa:pw@127.0.0.1:1?database=x", Quoting: []string{"a]", "a]];drop table x;--"}})
}

func BenchmarkStore(b *testing.B) { storetest.Bench(b, newStore) }
