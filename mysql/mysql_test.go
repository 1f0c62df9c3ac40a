package mysql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/mysql"
	"github.com/sqlease/sqlease/sqlstore"
	"github.com/sqlease/sqlease/storetest"
)

// database is where the conformance suite and the other tests run. Each
// store gets tables of its own, under a random prefix, dropped when the
// test ends.
var database = storetest.Database{
	Env: "SQLEASE_TEST_MYSQL_URL",
	Hint: "run scripts/test.sh, which starts a private MariaDB and sets it, " +
		"or set it yourself, e.g. SQLEASE_TEST_MYSQL_URL='mysql://user:password@127.0.0.1:3306/sqlease'",
	Tables: storetest.Tables{
		List: "SELECT CONCAT('`', table_name, '`') FROM information_schema.tables\n" +
			"WHERE table_schema = DATABASE() AND LEFT(table_name, CHAR_LENGTH(?)) = ?",
		Args: func(like string) []any { return []any{like, like} },
		Drop: "DROP TABLE IF EXISTS",
	},
	Open: mysql.OpenStore,
}

func databaseURL(tb testing.TB) string { return database.URL(tb) }

// newStore opens a store on tables under a fresh random prefix.
func newStore(tb testing.TB) *sqlstore.Store { s, _ := database.Store(tb); return s }

// newStoreWithPrefix is newStore, also returning the prefix.
func newStoreWithPrefix(tb testing.TB) (*sqlstore.Store, string) { return database.Store(tb) }

// randomPrefix returns a fresh table prefix.
func randomPrefix(tb testing.TB) string { return storetest.RandomPrefix(tb) }

func TestConformance(t *testing.T) {
	databaseURL(t)
	// The fence's bound on a frozen holder is whole seconds past the
	// lease's expiry (see the package doc and TestFrozenFenceBounded), too
	// coarse for the suite's 300 ms leases: to the suite, a frozen holder
	// keeps followers out.
	storetest.Run(t, storetest.Harness{New: func(t *testing.T) *sqlstore.Store { return newStore(t) }})
}

// TestConcurrentMigrate: a fleet starting at once on a fresh database
// migrates it without errors (CREATE TABLE IF NOT EXISTS under metadata
// locks).
func TestConcurrentMigrate(t *testing.T) { database.ConcurrentMigrate(t, mysql.Dialect) }

// TestFrozenFenceBounded: a holder that stops inside a fenced transaction
// keeps followers out at most about two seconds past its lease's expiry:
// the server then closes its connection, rolling the transaction back.
func TestFrozenFenceBounded(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	const ttl = 1500 * time.Millisecond
	a, err := s.Acquire(ctx, "frozen", "holder-a", ttl)
	if err != nil {
		t.Fatal(err)
	}
	resume := make(chan struct{})
	defer close(resume)
	inFn := make(chan struct{})
	fenced := make(chan error, 1)
	go func() {
		fenced <- s.Fenced(ctx, a.Token(), func(tx *sql.Tx) error {
			close(inFn)
			<-resume // frozen: no statement, the transaction idles
			_, err := tx.ExecContext(ctx, "SELECT 1")
			return err
		})
	}()
	<-inFn
	var b sqlease.Lease
	for {
		l, err := s.Acquire(ctx, "frozen", "holder-b", time.Minute)
		if err == nil {
			b = l
			break
		}
		if !errors.Is(err, sqlease.ErrLeaseHeld) {
			t.Fatalf("follower's Acquire: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	late := b.AcquiredAt.Sub(a.ExpiresAt)
	t.Logf("follower acquired %s after the frozen holder's lease expired", late)
	if late < 0 || late > 2500*time.Millisecond {
		t.Errorf("follower acquired %s after the lease expired, want within 2.5s", late)
	}
	resume <- struct{}{}
	select {
	case err := <-fenced:
		if err == nil {
			t.Fatal("the frozen holder's Fenced committed after its connection was closed")
		}
		t.Logf("the frozen holder's Fenced: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the frozen holder's Fenced did not return")
	}
}

// TestFencedStatementPastLease: a statement in a fenced transaction that
// runs past the lease is ended by the server and reported as ErrLeaseLost.
func TestFencedStatementPastLease(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	a, err := s.Acquire(ctx, "slow", "holder-a", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = s.Fenced(ctx, a.Token(), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "SELECT SLEEP(5)")
		return err
	})
	if !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("Fenced whose statement outlived the lease = %v, want ErrLeaseLost", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the statement was ended after %s, want about the lease's 300ms", took)
	}
}

// TestFenceSessionReset: the fence's session settings do not stay on the
// connection it returns to the pool.
func TestFenceSessionReset(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	s.DB().SetMaxOpenConns(1) // every call below uses the same connection
	a, err := s.Acquire(ctx, "reset", "holder-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	errBoom := errors.New("boom")
	for _, fn := range []func(*sql.Tx) error{
		func(tx *sql.Tx) error {
			var idle int
			var stmt float64
			if err := tx.QueryRowContext(ctx, "SELECT @@session.idle_transaction_timeout, @@session.max_statement_time").Scan(&idle, &stmt); err != nil {
				return err
			}
			if idle < 60 || idle > 62 || stmt < 59 || stmt > 61 {
				t.Errorf("inside the fence: idle_transaction_timeout %d, max_statement_time %g; want about the lease's minute", idle, stmt)
			}
			return nil
		},
		func(*sql.Tx) error { return errBoom },
	} {
		if err := s.Fenced(ctx, a.Token(), fn); err != nil && !errors.Is(err, errBoom) {
			t.Fatal(err)
		}
		var idle int
		var stmt float64
		if err := s.DB().QueryRowContext(ctx, "SELECT @@session.idle_transaction_timeout, @@session.max_statement_time").Scan(&idle, &stmt); err != nil {
			t.Fatal(err)
		}
		if idle != 1 || stmt != 0 {
			t.Errorf("after Fenced: idle_transaction_timeout %d, max_statement_time %g; want the pool's 1 (idleTransactionLimit) and the default 0", idle, stmt)
		}
	}
}

// TestClientFoundRowsPool: on a pool opened against the advice of New with
// clientFoundRows (rows affected counts matched rows), an acquire refused by
// another holder's lease still never succeeds.
func TestClientFoundRowsPool(t *testing.T) {
	s := newStore(t)
	dsn, err := mysql.DSN(databaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn+"&clientFoundRows=true")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d := s.Dialect()
	wrong := sqlstore.New(db, d)
	if _, err := s.Acquire(t.Context(), "cfr", "holder-a", time.Minute); err != nil {
		t.Fatal(err)
	}
	if l, err := wrong.Acquire(t.Context(), "cfr", "holder-b", time.Minute); err == nil {
		t.Fatalf("holder-b acquired %s while holder-a holds the lease", l.Token())
	}
}

// TestUnchangedWritesCount: MySQL counts changed rows, so writes that would
// leave a row as it is must still change it, or they read as "no such job".
func TestUnchangedWritesCount(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	if _, created, err := s.InsertJob(ctx, sqlstore.StoredJob{Job: sqlease.Job{Name: "j", MissedRuns: sqlease.RunOnce}, SpecHash: "h"}, time.Time{}); err != nil || !created {
		t.Fatalf("InsertJob: created=%v %v", created, err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if _, err := s.SetPaused(ctx, "j", false, ""); err != nil {
					t.Errorf("SetPaused to its value: %v", err)
					return
				}
				// A trigger of a job already due leaves its schedule as
				// it is (it runs the due occurrence).
				if _, err := s.Trigger(ctx, "j"); err != nil {
					t.Errorf("Trigger: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	// A paused job refuses a trigger (a conflict, not "no such job"), and a
	// pause by prefix counts the jobs it leaves as they were.
	for range 2 {
		if _, err := s.SetPaused(ctx, "j", true, "why"); err != nil {
			t.Fatalf("SetPaused to its value: %v", err)
		}
		if n, err := s.SetPausedPrefix(ctx, "j", true, "why"); err != nil || n != 1 {
			t.Fatalf("SetPausedPrefix of an unchanged job = %d, %v; want 1", n, err)
		}
	}
	if _, err := s.Trigger(ctx, "j"); !errors.Is(err, sqlease.ErrConflict) {
		t.Errorf("Trigger of a paused job = %v, want ErrConflict", err)
	}
	if _, err := s.SetPaused(ctx, "missing", true, ""); !errors.Is(err, sqlease.ErrNoJob) {
		t.Errorf("SetPaused of a missing job = %v, want ErrNoJob", err)
	}
	if _, created, err := s.InsertJob(ctx, sqlstore.StoredJob{Job: sqlease.Job{Name: "j", MissedRuns: sqlease.RunOnce}, SpecHash: "h"}, time.Time{}); err != nil || created {
		t.Errorf("InsertJob of a taken name: created=%v %v, want the existing row", created, err)
	}
}

// fixedParams are what DSN adds to every data source name.
const fixedParams = "parseTime=true&time_zone=%27%2B00%3A00%27"

func TestDSN(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"mysql://app:secret@db.example:3307/jobs", "app:secret@tcp(db.example:3307)/jobs?" + fixedParams},
		{"mysql://app@db.example/jobs", "app@tcp(db.example:3306)/jobs?" + fixedParams},
		{"mysql://db.example/jobs", "tcp(db.example:3306)/jobs?" + fixedParams},
		{"mysql://root@[::1]:3306/jobs", "root@tcp([::1]:3306)/jobs?" + fixedParams},
		// Percent-encoded user, password and database; a password may hold
		// any character.
		{"mysql://a%40b:p%40ss%2Fw%3Ard%3F@h:1/my%2Ddb", "a@b:p@ss/w:rd?@tcp(h:1)/my-db?" + fixedParams},
		// Driver parameters and system variables pass through; fixed ones
		// may be repeated with the same value.
		{"mysql://u:p@h/d?tls=skip-verify&timeout=5s&sql_mode=%27STRICT_ALL_TABLES%27&parseTime=true&loc=UTC",
			"u:p@tcp(h:3306)/d?parseTime=true&timeout=5s&tls=skip-verify&sql_mode=%27STRICT_ALL_TABLES%27&time_zone=%27%2B00%3A00%27"},
		{"mysql://u@h/d?interpolateParams=false&multiStatements=0&clientFoundRows=false&autocommit=1&time_zone=%2B00:00", "u@tcp(h:3306)/d?parseTime=true&autocommit=1&time_zone=%27%2B00%3A00%27"},
	} {
		got, err := mysql.DSN(tc.url)
		if err != nil {
			t.Errorf("DSN(%q): %v", tc.url, err)
			continue
		}
		if got != tc.want {
			t.Errorf("DSN(%q)\n got %s\nwant %s", tc.url, got, tc.want)
		}
		// The driver reads back what the URL said, with the fixed settings.
		cfg, err := gomysql.ParseDSN(got)
		if err != nil {
			t.Errorf("the driver cannot parse DSN(%q) = %s: %v", tc.url, got, err)
			continue
		}
		if !cfg.ParseTime || cfg.Loc != time.UTC || cfg.InterpolateParams || cfg.MultiStatements || cfg.ClientFoundRows ||
			cfg.Params["time_zone"] != "'+00:00'" || cfg.Net != "tcp" {
			t.Errorf("DSN(%q) = %s: driver settings %+v", tc.url, got, cfg)
		}
	}
	cfg, err := gomysql.ParseDSN(must(mysql.DSN("mysql://a%40b:p%40ss%2Fw%3Ard%3F@h:1/my%2Ddb")))
	if err != nil || cfg.User != "a@b" || cfg.Passwd != "p@ss/w:rd?" || cfg.Addr != "h:1" || cfg.DBName != "my-db" {
		t.Errorf("special characters did not survive: %+v %v", cfg, err)
	}

	for _, bad := range []string{
		"",
		"postgres://u:secret@h/d",
		"mysql:///d",
		"mysql://u:secret@h",
		"mysql://u:secret@h/",
		"mysql://u:secret@h/a/b",
		"mysql://u:secret@h/d#frag",
		"mysql://u:secret@h/d?parseTime=false",
		"mysql://u:secret@h/d?loc=Local",
		"mysql://u:secret@h/d?time_zone=%27%2B01%3A00%27",
		"mysql://u:secret@h/d?interpolateParams=true",
		"mysql://u:secret@h/d?multiStatements=true",
		"mysql://u:secret@h/d?clientFoundRows=true",
		"mysql://u:secret@h/d?autocommit=0",
		"mysql://u:secret@h/d?timeout=soon",
		"mysql://u:secret@h/d?a=%zz",
		"mysql://u:secret@h:port/d",
		"mysql://u:secret@h/d\x7f",
	} {
		got, err := mysql.DSN(bad)
		if !errors.Is(err, sqlease.ErrInvalidConfig) {
			t.Errorf("DSN(%q) = %q, %v; want ErrInvalidConfig", bad, got, err)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("DSN(%q): the error shows the password: %v", bad, err)
		}
		if _, err := mysql.Open(bad); !errors.Is(err, sqlease.ErrInvalidConfig) {
			t.Errorf("Open(%q) = %v, want ErrInvalidConfig", bad, err)
		}
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

func TestClassify(t *testing.T) {
	mysqlError := func(n uint16) *gomysql.MySQLError { return &gomysql.MySQLError{Number: n, Message: "synthetic"} }
	storetest.ClassifyDriverErrors(t, mysql.Classify, map[*gomysql.MySQLError]bool{
		mysqlError(1213): true,  // ER_LOCK_DEADLOCK
		mysqlError(1205): true,  // ER_LOCK_WAIT_TIMEOUT
		mysqlError(1040): true,  // ER_CON_COUNT_ERROR
		mysqlError(1203): true,  // ER_TOO_MANY_USER_CONNECTIONS
		mysqlError(1053): true,  // ER_SERVER_SHUTDOWN
		mysqlError(1927): true,  // ER_CONNECTION_KILLED
		mysqlError(2006): true,  // CR_SERVER_GONE_ERROR
		mysqlError(2013): true,  // CR_SERVER_LOST
		mysqlError(4031): true,  // ER_CLIENT_INTERACTION_TIMEOUT
		mysqlError(1062): false, // ER_DUP_ENTRY
		mysqlError(1064): false, // ER_PARSE_ERROR
		mysqlError(1146): false, // ER_NO_SUCH_TABLE
		mysqlError(1406): false, // ER_DATA_TOO_LONG
		mysqlError(1969): false, // ER_STATEMENT_TIMEOUT: the fence's, reported as ErrLeaseLost
	}, func(a, b *gomysql.MySQLError) bool { return a.Number == b.Number })
	for _, err := range []error{
		driver.ErrBadConn,
		gomysql.ErrInvalidConn,
		fmt.Errorf("begin: %w", driver.ErrBadConn),
		&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")},
	} {
		got := mysql.Classify(err)
		if !errors.Is(got, sqlease.ErrTransient) || !errors.Is(got, err) {
			t.Errorf("Classify(%v) = %v, want it transient and still matching", err, got)
		}
		if again := mysql.Classify(got); again != got {
			t.Errorf("Classify of a classified error wrapped it again: %v", again)
		}
	}
}

// TestDialectShape: the dialect replaces every statement that needs
// RETURNING with its write-then-read form and sets every other one.
func TestDialectShape(t *testing.T) {
	d, err := mysql.Dialect("sqlease")
	if err != nil {
		t.Fatal(err)
	}
	q, j := d.Queries, d.Jobs
	for name, wr := range map[string]sqlstore.WriteRead{"Acquire": q.AcquireWR, "Renew": q.RenewWR,
		"InsertJob": j.InsertJobWR, "SetPaused": j.SetPausedWR, "Trigger": j.TriggerWR, "ClaimJob": j.ClaimJobWR} {
		if wr.Write == "" || wr.Read == "" {
			t.Errorf("%sWR is not set", name)
		}
		if strings.Contains(wr.Write+wr.Read, "{") {
			t.Errorf("%sWR has an unreplaced placeholder: %+v", name, wr)
		}
	}
	for name, s := range map[string]string{"Acquire": q.Acquire, "Renew": q.Renew, "InsertJob": j.InsertJob,
		"SetPaused": j.SetPaused, "Trigger": j.Trigger, "ClaimJob": j.ClaimJob, "ClaimDue": j.ClaimDue} {
		if s != "" {
			t.Errorf("%s is set: the store would run it instead of its write-then-read form", name)
		}
	}
	for name, s := range map[string]string{"Release": q.Release, "Get": q.Get, "List": q.List, "FenceLock": q.FenceLock,
		"FenceCheck": q.FenceCheck, "FenceLimit": q.FenceLimit, "FenceLimitReset": q.FenceLimitReset, "Now": j.Now,
		"JobByName": j.JobByName, "JobByKey": j.JobByKey, "ListJobs": j.ListJobs, "DeleteJob": j.DeleteJob,
		"ClaimCandidates": j.ClaimCandidates, "ClaimLockIDs": j.ClaimLockIDs, "ClaimLockJobs": j.ClaimLockJobs, "AbandonRunning": j.AbandonRunning, "StartJob": j.StartJob, "InsertRun": j.InsertRun,
		"Heartbeat": j.Heartbeat, "FinishRun": j.FinishRun, "ReleaseJob": j.ReleaseJob, "Runs": j.Runs, "Stats": j.Stats,
		"PruneRuns": j.PruneRuns, "DueWindow": j.DueWindow, "Changed": j.Changed} {
		if s == "" {
			t.Errorf("%s is not set", name)
		}
		// {ids} is the store's: a list of placeholders, filled per call.
		if strings.Contains(strings.ReplaceAll(s, "{ids}", ""), "{") {
			t.Errorf("%s has an unreplaced placeholder: %s", name, s)
		}
	}
	if d.Time == nil || d.Classify == nil || d.IsUniqueViolation == nil || d.FenceExpired == nil {
		t.Error("Time, Classify, IsUniqueViolation or FenceExpired is not set")
	}
}

// TestOffline runs the scenarios every dialect shares that need no
// database: invalid prefixes, an empty connection string, Classify of errors
// that are not the driver's.
func TestOffline(t *testing.T) {
	storetest.Offline(t, storetest.Constructors{Dialect: mysql.Dialect, New: mysql.New, Open: mysql.Open, OpenStore: mysql.OpenStore,
		Classify: mysql.Classify, DSN: "mysql://u:p@127.0.0.1:1/db", Quoting: []string{"a`"}})
}

func BenchmarkStore(b *testing.B) { storetest.Bench(b, newStore) }

// TestIdleTransactionDoesNotHoldTheLease: a transaction of the pool left
// idle on the lease row — as by a process paused between the two
// statements of a renew (MariaDB has no UPDATE … RETURNING) — is ended by
// the server after a second, so another holder acquires the lease once it
// expires instead of waiting for the paused process (seen: a SIGSTOPped
// leader's renew kept three followers out until it woke).
func TestIdleTransactionDoesNotHoldTheLease(t *testing.T) {
	ctx := t.Context()
	s, prefix := newStoreWithPrefix(t)
	l, err := s.Acquire(ctx, "idle", "paused", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "UPDATE "+prefix+"_leases SET renewed_at = renewed_at WHERE lease_name = ?", l.Name); err != nil {
		t.Fatal(err)
	}
	// The paused holder's lease expires after 1 s; the acquire must not
	// wait for the idle transaction beyond its one-second limit.
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var got sqlease.Lease
	for {
		got, err = s.Acquire(actx, "idle", "next", time.Minute)
		if err == nil || !errors.Is(err, sqlease.ErrLeaseHeld) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("acquire while a paused transaction holds the row: %v after %s", err, time.Since(start))
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("acquire took %s: the idle transaction held the lease row past its expiry", took)
	}
	if got.Holder != "next" || got.Epoch != l.Epoch+1 {
		t.Fatalf("acquired %s, want next@%d", got.Token(), l.Epoch+1)
	}
}
