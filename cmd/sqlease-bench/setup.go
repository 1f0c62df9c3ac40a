package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	moderncsqlite "modernc.org/sqlite"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/pgtest"
	"github.com/sqlease/sqlease/mysql"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlite"
	"github.com/sqlease/sqlease/sqlstore"
)

const prefix = "sqlease" // table prefix, as the library's examples use

// env is what every scenario needs: where the databases live and how pools
// are configured.
type env struct {
	pgURL     string // a role allowed to CREATE DATABASE; "" when PostgreSQL is not benchmarked
	mysqlURL  string // MySQL/MariaDB (mysql.go): a user allowed to CREATE DATABASE; "" when not benchmarked
	pgss      bool   // pg_stat_statements is loaded and queryable from pgURL
	sqliteDir string
	maxIdle   int // <0: database/sql default (2)
	maxOpen   int // 0: unlimited (database/sql default)
	trace     bool
	verbose   bool
	// timeline: claim and leader runs record their dispatch (timeline.go);
	// "-" prints the analysis only, else the events go to this file too.
	timeline string

	dueSpread  time.Duration // due jobs' next_run_at spacing (0: all at one instant)
	dropNotify bool          // drop the jobs table's NOTIFY trigger after migrating (to measure its cost)
	postmaster int           // the server's postmaster pid when it runs on this machine (0: unknown)

	settleBusy float64       // wait for the machine to be at most this busy before a run
	settleWait time.Duration // … for at most this long
}

// target is one fresh, empty database for one run.
type target struct {
	env     *env
	dialect string
	dsn     string // postgres: URL of the fresh database; sqlite: file path
	dbName  string // postgres database name
	cleanup func()
}

func (e *env) newTarget(ctx context.Context, dialect string) (*target, error) {
	switch dialect {
	case "postgres":
		name := "sqlease_bench_" + randHex(4)
		conn, err := pgx.Connect(ctx, e.pgURL)
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", redact(e.pgURL), err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return nil, fmt.Errorf("create database %s: %w", name, err)
		}
		dsn, err := withDatabase(e.pgURL, name)
		if err != nil {
			return nil, err
		}
		return &target{env: e, dialect: dialect, dsn: dsn, dbName: name, cleanup: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, e.pgURL)
			if err != nil {
				return
			}
			defer conn.Close(context.Background())
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		}}, nil
	case "mysql":
		return e.newMySQLTarget(ctx)
	case "sqlite":
		dir, err := os.MkdirTemp(e.sqliteDir, "sqlease-bench-")
		if err != nil {
			return nil, err
		}
		return &target{env: e, dialect: dialect, dsn: filepath.Join(dir, "jobs.db"), cleanup: func() { os.RemoveAll(dir) }}, nil
	}
	return nil, fmt.Errorf("unknown dialect %q", dialect)
}

// withDatabase returns the postgres URL or key=value string with its
// database replaced by name.
func withDatabase(conn, name string) (string, error) {
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		u, err := url.Parse(conn)
		if err != nil {
			return "", fmt.Errorf("parse postgres URL: %w", err)
		}
		u.Path, u.RawPath = "/"+name, ""
		return u.String(), nil
	}
	return strings.TrimSpace(conn) + " dbname=" + name, nil
}

// open opens a new pool on the target, as a separate process would: its own
// *sql.DB, pool settings from the flags, traced when tr is not nil.
func (t *target) open(tr *tracer) (*sqlstore.Store, error) {
	var db *sql.DB
	var err error
	switch t.dialect {
	case "postgres":
		if tr == nil {
			db, err = postgres.Open(t.dsn) // exactly what the library's users get
		} else {
			var c driver.Connector
			c, err = stdlib.GetDefaultDriver().(driver.DriverContext).OpenConnector(t.dsn)
			if err == nil {
				// The pool postgres.Open tunes, or tracing alone would
				// churn connections.
				db = sqlstore.TunePool(sql.OpenDB(tracedConnector{c, tr}), sqlstore.DefaultMaxIdleConns)
			}
		}
	case "mysql":
		// No client-side count: the server counts (Questions).
		db, err = mysql.Open(t.dsn)
	case "sqlite":
		if tr == nil {
			db, err = sqlite.Open(t.dsn)
		} else {
			var c driver.Connector
			c, err = moderncsqlite.NewConnector(sqlite.DSN(t.dsn, 0))
			if err == nil {
				db = sql.OpenDB(tracedConnector{c, tr})
			}
		}
	}
	if err != nil {
		return nil, err
	}
	if t.env.maxIdle >= 0 {
		db.SetMaxIdleConns(t.env.maxIdle)
	}
	if t.env.maxOpen > 0 {
		db.SetMaxOpenConns(t.env.maxOpen)
	}
	var st *sqlstore.Store
	switch t.dialect {
	case "postgres":
		st, err = postgres.New(db, prefix)
	case "mysql":
		st, err = mysql.New(db, prefix)
	default:
		st, err = sqlite.New(db, prefix)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return st, nil
}

// seedKind says how seed sets next_run_at.
type seedKind int

const (
	seedDue    seedKind = iota // due: the template's next_run_at - (n-g)×step
	seedFuture                 // now + offset + g×step seconds
)

// seed creates one job through scheduler.Create (so every column is what the
// library writes), copies it n times in one INSERT … SELECT (generate_series
// on PostgreSQL, a recursive CTE on SQLite) under the names bench-1…bench-n,
// deletes the template, and ANALYZEs on PostgreSQL (what autovacuum would do
// shortly after such a bulk load). It returns the smallest and largest job id.
func seed(ctx context.Context, st *sqlstore.Store, dialect string, n int, kind seedKind, offset, step time.Duration) (minID, maxID int64, err error) {
	s, err := scheduler.New(scheduler.Config{Store: st})
	if err != nil {
		return 0, 0, err
	}
	tmpl := sqlease.Job{Name: "bench-template"}
	if kind == seedFuture {
		tmpl.Schedule.At = time.Now().Add(offset)
	}
	if _, _, err := s.Create(ctx, tmpl); err != nil {
		return 0, 0, fmt.Errorf("create template job: %w", err)
	}
	cols := `name, client_key, spec_hash, schedule, action, missed_runs, skip_if_older_than_ms,
	max_attempts, backoff_ms, lock_timeout_ms, paused, next_run_at, created_at, last_modified_at`
	var q string
	switch dialect {
	case "postgres":
		// Due jobs are spaced by `step` into the past (the last one due at
		// the template's time), as jobs submitted over time would be.
		next, stamp := "t.next_run_at - ($1::int - g) * $2::float8 * interval '1 second'", "t.created_at, t.last_modified_at"
		if kind == seedFuture {
			next = "now() + ($2::float8 + g * $3::float8) * interval '1 second'"
			stamp = "clock_timestamp(), clock_timestamp()"
		}
		q = `INSERT INTO ` + prefix + `_jobs (` + cols + `)
SELECT 'bench-' || g, NULL, t.spec_hash, t.schedule, t.action, t.missed_runs, t.skip_if_older_than_ms,
	t.max_attempts, t.backoff_ms, t.lock_timeout_ms, t.paused, ` + next + `, ` + stamp + `
FROM ` + prefix + `_jobs t CROSS JOIN generate_series(1, $1::int) g WHERE t.name = 'bench-template'`
	case "sqlite":
		next, stamp := "strftime('%Y-%m-%d %H:%M:%f', t.next_run_at, (-(?1 - x) * ?2) || ' seconds')", "t.created_at, t.last_modified_at"
		if kind == seedFuture {
			next = "strftime('%Y-%m-%d %H:%M:%f', 'now', (?2 + x * ?3) || ' seconds')"
			stamp = "strftime('%Y-%m-%d %H:%M:%f', 'now'), strftime('%Y-%m-%d %H:%M:%f', 'now')"
		}
		q = `WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < ?1)
INSERT INTO ` + prefix + `_jobs (` + cols + `)
SELECT 'bench-' || x, NULL, t.spec_hash, t.schedule, t.action, t.missed_runs, t.skip_if_older_than_ms,
	t.max_attempts, t.backoff_ms, t.lock_timeout_ms, t.paused, ` + next + `, ` + stamp + `
FROM ` + prefix + `_jobs t, g WHERE t.name = 'bench-template'`
	}
	db := st.DB()
	args := []any{n, step.Seconds()}
	if kind == seedFuture {
		args = append(args[:1], offset.Seconds(), step.Seconds())
	}
	if _, err := db.ExecContext(ctx, q, args...); err != nil {
		return 0, 0, fmt.Errorf("bulk insert %d jobs: %w", n, err)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM `+prefix+`_jobs WHERE name = 'bench-template'`); err != nil {
		return 0, 0, err
	}
	if dialect == "postgres" {
		if _, err := db.ExecContext(ctx, `ANALYZE `+prefix+`_jobs`); err != nil {
			return 0, 0, err
		}
	}
	err = db.QueryRowContext(ctx, `SELECT min(id), max(id) FROM `+prefix+`_jobs`).Scan(&minID, &maxID)
	return minID, maxID, err
}

// ---- private PostgreSQL through internal/pgtest ----

// benchTB is the minimal testing.TB that internal/pgtest needs (Helper,
// Name, Logf, Errorf, Fatalf, Cleanup). The embedded nil TB satisfies the
// interface's unexported method; any other method would panic, and pgtest
// calls none.
type benchTB struct {
	testing.TB
	cleanups []func()
	verbose  bool
}

func (t *benchTB) Helper()      {}
func (t *benchTB) Name() string { return "sqlease-bench" }
func (t *benchTB) Logf(format string, args ...any) {
	if t.verbose {
		fmt.Fprintf(os.Stderr, "pgtest: "+format+"\n", args...)
	}
}
func (t *benchTB) Errorf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
func (t *benchTB) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "sqlease-bench: "+format+"\n", args...)
	t.runCleanups()
	os.Exit(1)
}
func (t *benchTB) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }
func (t *benchTB) runCleanups() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	t.cleanups = nil
}

// startPrivatePostgres starts a throwaway server (the settings of
// scripts/test.sh: fsync, full_page_writes and synchronous_commit off) with
// pg_stat_statements preloaded, and returns its URL.
func startPrivatePostgres(tb *benchTB) string {
	srv := pgtest.Start(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		tb.Fatalf("connect to private server: %v", err)
	}
	_, err = conn.Exec(ctx, `ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'`)
	conn.Close(context.Background())
	if err != nil {
		tb.Fatalf("enable pg_stat_statements: %v", err)
	}
	srv.Restart(tb)
	return srv.URL()
}

// enablePGSS makes pg_stat_statements queryable from url, if the server
// preloads it.
func enablePGSS(ctx context.Context, url string) bool {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return false
	}
	defer conn.Close(context.Background())
	var libs string
	if conn.QueryRow(ctx, `SELECT current_setting('shared_preload_libraries')`).Scan(&libs) != nil || !strings.Contains(libs, "pg_stat_statements") {
		return false
	}
	_, err = conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
	return err == nil
}

// ---- server-side statistics ----

type pgStats struct {
	XactCommit, XactRollback, Sessions int64
	Stmts                              []pgStmt
}

type pgStmt struct {
	Query   string
	Calls   int64
	TotalMS float64
	Rows    int64
}

// serverStats reads pg_stat_database and pg_stat_statements for the target
// database. Call it after the run's pools are closed: backends flush their
// counters to pg_stat_database when they exit.
func (e *env) serverStats(ctx context.Context, dbName string) (pgStats, error) {
	var out pgStats
	conn, err := pgx.Connect(ctx, e.pgURL)
	if err != nil {
		return out, err
	}
	defer conn.Close(context.Background())
	// Give exiting backends a moment to report.
	time.Sleep(300 * time.Millisecond)
	_, _ = conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`)
	if err := conn.QueryRow(ctx, `SELECT xact_commit, xact_rollback, sessions FROM pg_stat_database WHERE datname = $1`, dbName).
		Scan(&out.XactCommit, &out.XactRollback, &out.Sessions); err != nil {
		return out, fmt.Errorf("pg_stat_database: %w", err)
	}
	if !e.pgss {
		return out, nil
	}
	rows, err := conn.Query(ctx, `SELECT query, calls, total_exec_time, rows FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) ORDER BY calls DESC`, dbName)
	if err != nil {
		return out, fmt.Errorf("pg_stat_statements: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var s pgStmt
		if err := rows.Scan(&s.Query, &s.Calls, &s.TotalMS, &s.Rows); err != nil {
			return out, err
		}
		out.Stmts = append(out.Stmts, s)
	}
	return out, rows.Err()
}

// ---- statement labels ----

var (
	reParam  = regexp.MustCompile(`\$\d+|\?\d*`)
	reString = regexp.MustCompile(`'[^']*'`)
	reNumber = regexp.MustCompile(`\b\d+(\.\d+)?\b`)
	// pg_stat_statements also replaces these constants.
	reKeyword = regexp.MustCompile(`\b(null|true|false)\b`)
)

// normalizeSQL makes a statement comparable with pg_stat_statements' text,
// which replaces constants with $n.
func normalizeSQL(q string) string {
	q = strings.ToLower(oneLine(q))
	q = reString.ReplaceAllString(q, "?")
	q = reParam.ReplaceAllString(q, "?")
	q = reNumber.ReplaceAllString(q, "?")
	q = reKeyword.ReplaceAllString(q, "?")
	return strings.Join(strings.Fields(q), " ")
}

// statementLabels maps each statement of the dialect (normalized) to the
// name of its field in sqlstore.JobQueries / sqlstore.Queries, so that
// output says "ClaimDue" instead of forty lines of SQL.
func statementLabels(d sqlstore.Dialect) func(string) string {
	m := map[string]string{}
	add := func(v reflect.Value, prefix string) {
		for i := 0; i < v.NumField(); i++ {
			f := v.Field(i)
			if f.Kind() == reflect.String && f.String() != "" {
				m[normalizeSQL(f.String())] = prefix + v.Type().Field(i).Name
			}
		}
	}
	add(reflect.ValueOf(d.Jobs), "")
	add(reflect.ValueOf(d.Queries), "lease.")
	for _, s := range []string{"BEGIN", "COMMIT", "ROLLBACK", "begin", "commit", "rollback",
		"begin isolation level read committed", "begin read write"} {
		m[normalizeSQL(s)] = strings.ToUpper(strings.Fields(s)[0])
	}
	return func(q string) string {
		n := normalizeSQL(q)
		if l, ok := m[n]; ok {
			return l
		}
		if strings.HasPrefix(n, "begin") {
			return "BEGIN"
		}
		s := oneLine(q)
		if len(s) > 60 {
			s = s[:57] + "..."
		}
		return s
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// redact hides a password in a URL for messages.
func redact(u string) string {
	if cfg, err := pgx.ParseConfig(u); err == nil && cfg.Password != "" {
		return strings.ReplaceAll(u, cfg.Password, "****")
	}
	return u
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// findPostmaster returns the pid of the server's postmaster when the server
// runs on this machine (a backend's parent), else 0.
func findPostmaster(ctx context.Context, url string) int {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0
	}
	defer conn.Close(context.Background())
	var pid int
	if conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid) != nil {
		return 0
	}
	ppid, _, _, ok := procCPU(pid)
	if !ok {
		return 0
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(ppid) + "/comm"); err != nil || !strings.HasPrefix(string(b), "postgres") {
		return 0
	}
	return ppid
}

// pgCPUStart samples the server's CPU; the returned func gives the use since.
func (e *env) pgCPUStart() func() *pgCPUUse {
	if e.postmaster == 0 {
		return func() *pgCPUUse { return nil }
	}
	a, ok := samplePGCPU(e.postmaster)
	return func() *pgCPUUse {
		b, ok2 := samplePGCPU(e.postmaster)
		if !ok || !ok2 {
			return nil
		}
		u := pgCPUBetween(a, b)
		return &u
	}
}

// migrate applies the migrations and, with -no-notify-trigger, drops the
// change-feed trigger PostgreSQL's migrations install on the jobs table.
func (t *target) migrate(ctx context.Context, st *sqlstore.Store) error {
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	if t.env.dropNotify && t.dialect == "postgres" {
		if _, err := st.DB().ExecContext(ctx, `DROP TRIGGER IF EXISTS `+prefix+`_jobs_notify ON `+prefix+`_jobs`); err != nil {
			return err
		}
	}
	return nil
}

// migrated opens a store (untraced) on a fresh target database and
// migrates its schema, as most scenarios begin; done closes the store and
// drops the database.
func (e *env) migrated(ctx context.Context, dialect string) (tg *target, st *sqlstore.Store, done func(), err error) {
	if tg, err = e.newTarget(ctx, dialect); err != nil {
		return nil, nil, nil, err
	}
	if st, err = tg.open(nil); err != nil {
		tg.cleanup()
		return nil, nil, nil, err
	}
	done = func() { st.DB().Close(); tg.cleanup() }
	if err = tg.migrate(ctx, st); err != nil {
		done()
		return nil, nil, nil, err
	}
	return tg, st, done, nil
}
