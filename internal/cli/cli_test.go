package cli_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	neturl "net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/cli"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/internal/syncbuf"
	"github.com/sqlease/sqlease/internal/testserver"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/sqlite"
)

// These tests drive the command line in-process through cli.Main with a
// fake environment (no variable of the test process leaks in) and temporary
// directories; nothing but loopback is used.

// result is what one cli.Main call did.
type result struct {
	args           []string
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("sqlease %s: exit %d\n--- stdout ---\n%s--- stderr ---\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// run calls cli.Main with args, the environment env (and nothing else) and
// stdin.
func run(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	return runCtx(t, context.Background(), env, stdin, args...)
}

func runCtx(t *testing.T, ctx context.Context, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	var out, errb syncbuf.Buffer
	code := cli.Main(ctx, args, cli.Env{
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return env[k] },
	})
	return result{args: args, code: code, stdout: out.String(), stderr: errb.String()}
}

// ok fails the test unless the command succeeded.
func (r result) ok(t *testing.T) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("want exit 0, got %v", r)
	}
	return r
}

// usage checks a usage or configuration error: exit 2, nothing on stdout
// and exactly one line on stderr that contains every one of want.
func (r result) usage(t *testing.T, want ...string) {
	t.Helper()
	r.oneLine(t, 2, want...)
}

// oneLine checks the exit status and that stderr is exactly one line
// containing every one of want, and stdout is empty.
func (r result) oneLine(t *testing.T, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("want exit %d, got %v", code, r)
		return
	}
	if r.stdout != "" {
		t.Errorf("want nothing on stdout, got %v", r)
	}
	if !strings.HasSuffix(r.stderr, "\n") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("want exactly one line on stderr, got %v", r)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr %q does not contain %q", r.stderr, w)
		}
	}
}

func sqliteURL(t *testing.T) (url, path string) {
	path = filepath.Join(t.TempDir(), "sqlease.db")
	return "sqlite:" + path, path
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVersion(t *testing.T) {
	r := run(t, nil, "", "version").ok(t)
	if !strings.HasPrefix(r.stdout, "sqlease ") || strings.Count(r.stdout, "\n") != 1 || r.stderr != "" ||
		strings.Contains(r.stdout, "(devel)") || !strings.Contains(r.stdout, runtime.Version()) {
		t.Errorf("want one line \"sqlease <version> (…; <go version> …)\", got %v", r)
	}

	old := cli.Version
	cli.Version = "v9.8.7-test"
	defer func() { cli.Version = old }()
	r = run(t, nil, "", "version").ok(t)
	if !strings.HasPrefix(r.stdout, "sqlease v9.8.7-test (") {
		t.Errorf("with -ldflags version: want %q first, got %v", "sqlease v9.8.7-test", r)
	}
}

func TestUsageErrors(t *testing.T) {
	db, _ := sqliteURL(t)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"unknown command", []string{"frobnicate"}, []string{`unknown command "frobnicate"`}},
		{"unknown flag on serve", []string{"serve", "--bogus-flag", "1"}, []string{"unknown flag", "--bogus-flag"}},
		{"unknown flag on migrate", []string{"migrate", "--lease-duration", "1s"}, []string{"unknown flag", "--lease-duration"}},
		{"unknown flag on jobs list", []string{"jobs", "list", "--nope"}, []string{"unknown flag", "--nope"}},
		{"extra arg to serve", []string{"serve", "--db", db, "extra"}, []string{"serve", "no arguments", "extra"}},
		{"extra arg to migrate", []string{"migrate", "--db", db, "extra"}, []string{"migrate", "no arguments", "extra"}},
		{"extra arg to status", []string{"status", "--db", db, "extra"}, []string{"status", "no arguments", "extra"}},
		{"extra arg to version", []string{"version", "extra"}, []string{"version", "no arguments", "extra"}},
		{"extra arg to schema", []string{"schema", "--dialect", "sqlite", "extra"}, []string{"schema", "no arguments", "extra"}},
		{"extra arg to jobs list", []string{"jobs", "list", "--db", db, "extra"}, []string{"list", "no arguments", "extra"}},
		{"two args to jobs get", []string{"jobs", "get", "--db", db, "a", "b"}, []string{"get", "exactly one argument", "NAME"}},
		{"no arg to jobs pause", []string{"jobs", "pause", "--db", db}, []string{"pause", "exactly one argument", "NAME"}},
		{"jobs without subcommand", []string{"jobs"}, []string{"jobs", "subcommand"}},
		{"jobs add without -f", []string{"jobs", "add", "--db", db}, []string{"file", "-f"}},
		{"jobs add missing file", []string{"jobs", "add", "--db", db, "-f", filepath.Join(t.TempDir(), "missing.json")}, []string{"file", "missing.json"}},
		{"jobs list bad limit", []string{"jobs", "list", "--db", db, "--limit", "0"}, []string{"limit"}},
		{"schema without dialect", []string{"schema"}, []string{"dialect", "required"}},
		{"schema bad dialect", []string{"schema", "--dialect", "oracle"}, []string{"dialect", "oracle"}},
		{"bad dispatch", []string{"serve", "--db", db, "--dispatch", "fanout"}, []string{"dispatch", "flag --dispatch", "leader, claim", "fanout"}},
		{"bad election", []string{"serve", "--db", db, "--election", "raft"}, []string{"election", "lease, advisory", "raft"}},
		{"bad log format", []string{"serve", "--db", db, "--log-format", "xml"}, []string{"log_format", "xml"}},
		{"bad log level", []string{"serve", "--db", db, "--log-level", "loud"}, []string{"log_level", "loud"}},
		{"bad migrate", []string{"serve", "--db", db, "--migrate", "maybe"}, []string{"migrate", "true or false", "maybe"}},
		{"bad duration flag", []string{"serve", "--db", db, "--lease-duration", "banana"}, []string{"lease_duration", "flag --lease-duration", "banana"}},
		{"duration without unit", []string{"serve", "--db", db, "--acquire-interval", "5"}, []string{"acquire_interval", "flag --acquire-interval"}},
		{"renew interval longer than lease", []string{"serve", "--db", db, "--renew-interval", "5s", "--lease-duration", "2s"}, []string{"renew_interval", "lease_duration", "shorter"}},
		{"renew interval equal to lease", []string{"serve", "--db", db, "--renew-interval", "2s", "--lease-duration", "2s"}, []string{"renew_interval", "lease_duration", "shorter"}},
		{"renew interval within safety margin", []string{"serve", "--db", db, "--renew-interval", "1900ms", "--lease-duration", "2s"}, []string{"renew_interval", "safety_margin"}},
		{"negative acquire interval", []string{"serve", "--db", db, "--acquire-interval", "-1s"}, []string{"acquire_interval", "positive"}},
		{"zero poll interval", []string{"serve", "--db", db, "--poll-interval", "0s"}, []string{"poll_interval", "positive"}},
		{"zero refresh interval", []string{"serve", "--db", db, "--schedule-refresh-interval", "0s"}, []string{"schedule_refresh_interval", "positive"}},
		{"bad holder id", []string{"serve", "--db", db, "--holder-id", "a b"}, []string{"holder"}},
		{"bad lease name", []string{"serve", "--db", db, "--lease-name", "no/slash"}, []string{"lease name", "no/slash"}},
		{"advisory on sqlite", []string{"serve", "--db", db, "--election", "advisory"}, []string{"election", "advisory", "sqlite"}},
		{"bad table prefix", []string{"migrate", "--db", db, "--table-prefix", "Bad-Prefix"}, []string{"table_prefix", "Bad-Prefix"}},
		{"unsupported db scheme", []string{"migrate", "--db", "oracle://h/x"}, []string{"db", "oracle://h/x"}},
		{"sqlite without path", []string{"migrate", "--db", "sqlite:"}, []string{"db", "path"}},
		// (openStore runs before the listener is bound: a database of its own.)
		{"bad http address", []string{"serve", "--db", db + "-http", "--http", "256.0.0.1:80"}, []string{"http", "256.0.0.1:80"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run(t, nil, "", tc.args...).usage(t, tc.want...)
		})
	}
	// None of the rejected serve configurations touched the database.
	if _, err := os.Stat(strings.TrimPrefix(db, "sqlite:")); err == nil {
		t.Errorf("a rejected command created the database file %s", db)
	}
}

// TestSchemaSQLite applies the printed schema to a fresh SQLite file, then
// the printed seed, and checks the commands see both.
func TestSchemaSQLite(t *testing.T) {
	db, path := sqliteURL(t)
	schema := run(t, nil, "", "schema", "--dialect", "sqlite").ok(t).stdout
	seed := run(t, nil, "", "schema", "--dialect", "sqlite", "--seed").ok(t).stdout
	for _, want := range []string{"CREATE TABLE IF NOT EXISTS sqlease_leases", "sqlease_jobs", "sqlease_runs"} {
		if !strings.Contains(schema, want) {
			t.Errorf("schema does not contain %q:\n%s", want, schema)
		}
	}
	if !strings.Contains(seed, "INSERT INTO sqlease_jobs") || strings.Contains(seed, "CREATE TABLE") {
		t.Errorf("--seed should print only the insert:\n%s", seed)
	}

	sdb, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	applySchema(t, sdb, schema, seed)
	var tables int
	if err := sdb.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'sqlease_%'`).Scan(&tables); err != nil || tables != 9 {
		t.Fatalf("want 9 sqlease tables (leases, jobs, runs, run_output, run_checkpoints, occurrences, singletons, lease_history, revoked_sessions) after the script, got %d (%v)", tables, err)
	}
	checkSeeded(t, db)

	// migrate on a database made by the script is a no-op.
	run(t, nil, "", "migrate", "--db", db).ok(t)
	checkSeeded(t, db)

	// A prefix goes into every table name.
	other := run(t, nil, "", "schema", "--dialect", "sqlite", "--table-prefix", "acme").ok(t).stdout
	if strings.Contains(other, "sqlease_") || !strings.Contains(other, "acme_jobs") {
		t.Errorf("--table-prefix acme not applied:\n%s", other)
	}
	if _, err := sdb.Exec(other); err != nil {
		t.Fatalf("applying the acme schema: %v", err)
	}
}

// applySchema applies schema and seed as a DBA would: the whole script at
// once, then the seed twice (it is idempotent).
func applySchema(t *testing.T, db *sql.DB, schema, seed string) {
	t.Helper()
	for i, script := range []string{schema, seed, seed} {
		if _, err := db.Exec(script); err != nil {
			t.Fatalf("applying script %d: %v\n%s", i, err, script)
		}
	}
}

// checkSeeded checks that the seed's job is there, as jobs get, jobs list
// and status show it, and that creating the same job through the CLI is an
// idempotent repeat (the seed has the API's content hash).
func checkSeeded(t *testing.T, db string) {
	t.Helper()
	var got jobOut
	decode(t, run(t, nil, "", "jobs", "get", "--db", db, "example-heartbeat").ok(t), &got)
	if got.Name != "example-heartbeat" || got.Schedule.Every != "1m0s" || got.State != "active" || got.NextRunAt == "" {
		t.Errorf("seeded job: %+v", got)
	}
	var action struct {
		Exec struct {
			Command []string `json:"command"`
		} `json:"exec"`
	}
	if err := json.Unmarshal(got.Action, &action); err != nil || len(action.Exec.Command) != 1 || action.Exec.Command[0] != "true" {
		t.Errorf("seeded job's action: %s (%v)", got.Action, err)
	}
	st := run(t, nil, "", "status", "--db", db).ok(t)
	if !strings.Contains(st.stdout, "jobs: 1 total, 1 active, 0 paused") {
		t.Errorf("status after seeding: %v", st)
	}
	same := `{"name": "example-heartbeat", "schedule": {"every": "1m"}, "action": {"exec": {"command": ["true"], "timeout": "10s"}}}`
	r := run(t, nil, same, "jobs", "add", "--db", db, "-f", "-").ok(t)
	if !strings.Contains(r.stderr, "already exists with the same content") {
		t.Errorf("adding the seeded job again should be an idempotent repeat: %v", r)
	}
}

// postgresURL returns a fresh database on $SQLEASE_TEST_POSTGRES_URL, or
// skips.
func postgresURL(t *testing.T) string {
	return dbtest.PostgresURL(t)
}

func TestSchemaPostgres(t *testing.T) {
	db := postgresURL(t)
	schema := run(t, nil, "", "schema", "--dialect", "postgres").ok(t).stdout
	seed := run(t, nil, "", "schema", "--dialect", "postgres", "--seed").ok(t).stdout
	pdb, err := postgres.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer pdb.Close()
	applySchema(t, pdb, schema, seed)
	checkSeeded(t, db)
	run(t, nil, "", "migrate", "--db", db).ok(t)
	checkSeeded(t, db)
}

// jobOut is the part of the API's job JSON the tests look at.
type jobOut struct {
	Name     string `json:"name"`
	Schedule struct {
		Every string `json:"every"`
		Cron  string `json:"cron"`
	} `json:"schedule"`
	Action    json.RawMessage `json:"action"`
	State     string          `json:"state"`
	NextRunAt string          `json:"next_run_at"`
	Runs      []any           `json:"runs"`
}

func decode(t *testing.T, r result, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("stdout is not the expected JSON: %v\n%v", err, r)
	}
}

func listNames(t *testing.T, db string, extra ...string) (names []string, next string) {
	t.Helper()
	var out struct {
		Jobs []jobOut `json:"jobs"`
		Next string   `json:"next"`
	}
	decode(t, run(t, nil, "", append([]string{"jobs", "list", "--db", db}, extra...)...).ok(t), &out)
	for _, j := range out.Jobs {
		names = append(names, j.Name)
	}
	return names, out.Next
}

func TestJobsCommands(t *testing.T) {
	db, _ := sqliteURL(t)
	r := run(t, nil, "", "migrate", "--db", db).ok(t)
	if r.stdout != "migrated "+db+" (sqlite)\n" {
		t.Errorf("migrate: %v", r)
	}
	run(t, nil, "", "migrate", "--db", db).ok(t) // idempotent

	st := run(t, nil, "", "status", "--db", db).ok(t)
	if !strings.Contains(st.stdout, "(none)") || !strings.Contains(st.stdout, "jobs: 0 total") {
		t.Errorf("status of an empty database: %v", st)
	}

	// add from standard input.
	hourly := `{"name": "hourly", "schedule": {"every": "1h"}, "action": {"exec": {"command": ["true"]}}}`
	var j jobOut
	decode(t, run(t, nil, hourly, "jobs", "add", "--db", db, "-f", "-").ok(t), &j)
	if j.Name != "hourly" || j.State != "active" || j.Schedule.Every != "1h0m0s" || j.NextRunAt == "" {
		t.Errorf("jobs add: %+v", j)
	}
	// The same content from a file: an idempotent repeat.
	r = run(t, nil, "", "jobs", "add", "--db", db, "-f", writeFile(t, "hourly.json", hourly)).ok(t)
	if !strings.Contains(r.stderr, "already exists with the same content") {
		t.Errorf("repeat add: %v", r)
	}
	// The same name with other content: a clash, not a usage error.
	clash := `{"name": "hourly", "schedule": {"every": "2h"}, "action": {"exec": {"command": ["true"]}}}`
	run(t, nil, clash, "jobs", "add", "--db", db, "-f", "-").oneLine(t, 1, "hourly", "different content")

	cron := `{"name": "at-noon", "schedule": {"cron": "0 12 * * *", "timezone": "Europe/Paris"}, "action": {"http": {"url": "http://127.0.0.1:9/hook"}}}`
	run(t, nil, cron, "jobs", "add", "--db", db, "-f", "-").ok(t)

	names, next := listNames(t, db)
	if strings.Join(names, ",") != "at-noon,hourly" || next != "" {
		t.Errorf("jobs list: %v next %q", names, next)
	}
	names, next = listNames(t, db, "--limit", "1")
	if strings.Join(names, ",") != "at-noon" || next != "at-noon" {
		t.Errorf("jobs list --limit 1: %v next %q", names, next)
	}
	names, _ = listNames(t, db, "--limit", "1", "--after", next)
	if strings.Join(names, ",") != "hourly" {
		t.Errorf("jobs list --after %s: %v", next, names)
	}

	decode(t, run(t, nil, "", "jobs", "get", "--db", db, "hourly").ok(t), &j)
	if j.Name != "hourly" || j.Runs == nil || len(j.Runs) != 0 {
		t.Errorf("jobs get: %+v", j)
	}

	decode(t, run(t, nil, "", "jobs", "pause", "--db", db, "hourly").ok(t), &j)
	if j.State != "paused" {
		t.Errorf("after pause: %+v", j)
	}
	decode(t, run(t, nil, "", "jobs", "get", "--db", db, "hourly").ok(t), &j)
	if j.State != "paused" {
		t.Errorf("get after pause: %+v", j)
	}
	st = run(t, nil, "", "status", "--db", db).ok(t)
	if !strings.Contains(st.stdout, "jobs: 2 total, 1 active, 1 paused") {
		t.Errorf("status: %v", st)
	}
	decode(t, run(t, nil, "", "jobs", "resume", "--db", db, "hourly").ok(t), &j)
	if j.State != "active" {
		t.Errorf("after resume: %+v", j)
	}

	// trigger makes the job due now: next_run_at moves from an hour ahead
	// to about now.
	before := time.Now()
	decode(t, run(t, nil, "", "jobs", "trigger", "--db", db, "hourly").ok(t), &j)
	next2, err := time.Parse(time.RFC3339Nano, j.NextRunAt)
	if err != nil || next2.After(time.Now().Add(time.Minute)) || next2.Before(before.Add(-time.Minute)) {
		t.Errorf("after trigger, next_run_at %q should be about now (%v)", j.NextRunAt, err)
	}
	st = run(t, nil, "", "status", "--db", db).ok(t)
	if !strings.Contains(st.stdout, "1 due now") {
		t.Errorf("status after trigger: %v", st)
	}

	r = run(t, nil, "", "jobs", "delete", "--db", db, "hourly").ok(t)
	if r.stdout != "deleted hourly\n" {
		t.Errorf("delete: %v", r)
	}
	run(t, nil, "", "jobs", "get", "--db", db, "hourly").oneLine(t, 1, "hourly", "no such job")
	run(t, nil, "", "jobs", "delete", "--db", db, "hourly").oneLine(t, 1, "hourly", "no such job")
	run(t, nil, "", "jobs", "trigger", "--db", db, "hourly").oneLine(t, 1, "hourly", "no such job")
	names, _ = listNames(t, db)
	if strings.Join(names, ",") != "at-noon" {
		t.Errorf("after delete: %v", names)
	}
}

// TestJobsAddInvalid checks that an invalid job is a usage error naming the
// field, and that nothing is written.
func TestJobsAddInvalid(t *testing.T) {
	db, _ := sqliteURL(t)
	run(t, nil, "", "migrate", "--db", db).ok(t)
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"empty", "", []string{"body"}},
		{"truncated", `{"name": "x",`, []string{"body", "JSON"}},
		{"not an object", `[1, 2]`, []string{"body"}},
		{"unknown field", `{"name": "x", "schedule": {}, "action": {"exec": {"command": ["true"]}}, "colour": "red"}`, []string{"colour"}},
		{"trailing data", `{"name": "x", "schedule": {}, "action": {"exec": {"command": ["true"]}}} {}`, []string{"body", "after"}},
		{"wrong type", `{"name": 7, "schedule": {}, "action": {"exec": {"command": ["true"]}}}`, []string{"name"}},
		{"bad every", `{"name": "x", "schedule": {"every": "soon"}, "action": {"exec": {"command": ["true"]}}}`, []string{"schedule.every", "soon"}},
		{"negative every", `{"name": "x", "schedule": {"every": "-1m"}, "action": {"exec": {"command": ["true"]}}}`, []string{"schedule.every"}},
		{"bad at", `{"name": "x", "schedule": {"at": "tomorrow"}, "action": {"exec": {"command": ["true"]}}}`, []string{"schedule.at", "tomorrow"}},
		{"bad cron", `{"name": "x", "schedule": {"cron": "every day"}, "action": {"exec": {"command": ["true"]}}}`, []string{"schedule.cron"}},
		{"bad timezone", `{"name": "x", "schedule": {"cron": "0 * * * *", "timezone": "Mars/Olympus"}, "action": {"exec": {"command": ["true"]}}}`, []string{"timezone"}},
		{"bad name", `{"name": "Not Valid", "schedule": {}, "action": {"exec": {"command": ["true"]}}}`, []string{"name"}},
		{"no action", `{"name": "x", "schedule": {}}`, []string{"action"}},
		{"empty command", `{"name": "x", "schedule": {}, "action": {"exec": {"command": []}}}`, []string{"action.exec.command"}},
		{"bad url", `{"name": "x", "schedule": {}, "action": {"http": {"url": "ftp://h/x"}}}`, []string{"action.http.url"}},
		{"bad missed_runs", `{"name": "x", "schedule": {}, "action": {"exec": {"command": ["true"]}}, "missed_runs": "sometimes"}`, []string{"missed_runs"}},
		{"bad backoff", `{"name": "x", "schedule": {}, "action": {"exec": {"command": ["true"]}}, "retry": {"backoff": "1 second"}}`, []string{"retry.backoff"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run(t, nil, tc.body, "jobs", "add", "--db", db, "-f", "-").usage(t, tc.want...)
		})
	}
	if names, _ := listNames(t, db); len(names) != 0 {
		t.Errorf("invalid jobs were written: %v", names)
	}
}

// TestPasswordNeverPrinted runs every command that takes --db against a
// PostgreSQL URL whose server does not exist: they fail, and no output
// holds the password.
func TestPasswordNeverPrinted(t *testing.T) {
	const secret = "s3cr3t-Pa55"
	urls := []string{
		"postgres://user:" + secret + "@127.0.0.1:1/x",
		"postgresql://user:" + secret + "@127.0.0.1:1/x?sslmode=disable",
		"postgres://user:" + secret + "@[::1", // unparsable
		"oracle://user:" + secret + "@127.0.0.1:1/x",
	}
	cmds := [][]string{
		{"migrate"}, {"status"}, {"jobs", "list"}, {"jobs", "get", "x"}, {"jobs", "delete", "x"},
		{"serve", "--http", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug"},
		{"serve", "--http", "127.0.0.1:0", "--log-format", "text", "--log-level", "debug"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, u := range urls {
		for _, cmd := range cmds {
			// As a flag, and as the environment twin.
			for _, viaEnv := range []bool{false, true} {
				args, env := append([]string{}, cmd...), map[string]string{}
				if viaEnv {
					env["SQLEASE_DB"] = u
				} else {
					args = append(args, "--db", u)
				}
				r := runCtx(t, ctx, env, "", args...)
				if r.code == 0 {
					t.Errorf("want a failure, got %v", r)
				}
				if strings.Contains(r.stdout+r.stderr, secret) {
					t.Errorf("the password is printed: %v", r)
				}
				if r.stderr == "" {
					t.Errorf("want an error message, got %v", r)
				}
			}
		}
	}
	// Through a config file too.
	cfg := writeFile(t, "sqlease.yaml", "db: postgres://user:"+secret+"@127.0.0.1:1/x\nhttp: 127.0.0.1:0\n")
	r := runCtx(t, ctx, nil, "", "serve", "--config", cfg)
	if r.code == 0 || strings.Contains(r.stdout+r.stderr, secret) {
		t.Errorf("config file: %v", r)
	}
}

// TestPasswordNotLoggedByRunningNode puts a password into the URL of a
// reachable PostgreSQL (whose trust authentication ignores it) and checks
// that neither a running node's debug log nor migrate, status and jobs
// print it.
func TestPasswordNotLoggedByRunningNode(t *testing.T) {
	const secret = "hunter2-e2e"
	db := postgresURL(t)
	u, err := neturl.Parse(db)
	if err != nil || u.User == nil {
		t.Skipf("cannot add a password to %q", db)
	}
	u.User = neturl.UserPassword(u.User.Username(), secret)
	db = u.String()

	for _, args := range [][]string{{"migrate"}, {"status"}, {"jobs", "list"}} {
		r := run(t, nil, "", append(args, "--db", db)...).ok(t)
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("the password is printed: %v", r)
		}
	}
	addr := freeAddr(t)
	log, stop := startServe(t, addr, map[string]string{"SQLEASE_DB": db}, "--http", addr, "--holder-id", "pw",
		"--log-format", "json", "--log-level", "debug", "--lease-duration", "1s", "--renew-interval", "250ms", "--acquire-interval", "100ms")
	for _, path := range []string{"/v1/leases", "/v1/jobs", "/metrics", "/v1/jobs/nope"} {
		if body, _ := get(addr, path); strings.Contains(body, secret) {
			t.Errorf("GET %s shows the password", path)
		}
	}
	r := stop()
	if r.code != 0 {
		t.Errorf("serve: %v", r)
	}
	if !strings.Contains(log.String(), "node_started") {
		t.Errorf("no node_started in the log:\n%s", log.String())
	}
	if strings.Contains(log.String(), secret) {
		t.Errorf("the node's log shows the password:\n%s", log.String())
	}
}

// freeAddr returns a loopback address with a port that is free right now.
func freeAddr(t *testing.T) string { return testserver.FreeAddr(t) }

// startServe runs "sqlease serve" in-process until the test ends and waits
// until addr answers /readyz with mode=leader. It returns the node's log
// and a stop function that cancels it and returns its result.
func startServe(t *testing.T, addr string, env map[string]string, args ...string) (log *syncbuf.Buffer, stop func() result) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncbuf.Buffer
	log = &syncbuf.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, append([]string{"serve"}, args...), cli.Env{
			Stdin: strings.NewReader(""), Stdout: &out, Stderr: log,
			Getenv: func(k string) string { return env[k] },
		})
	}()
	var res *result
	stop = func() result {
		if res == nil {
			cancel()
			select {
			case code := <-done:
				res = &result{args: args, code: code, stdout: out.String(), stderr: log.String()}
			case <-time.After(30 * time.Second):
				t.Fatalf("serve did not stop within 30s after its context ended; log:\n%s", log.String())
			}
		}
		return *res
	}
	t.Cleanup(func() { stop() })

	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case code := <-done:
			res = &result{args: args, code: code, stdout: out.String(), stderr: log.String()}
			t.Fatalf("serve exited early: %v", *res)
		default:
		}
		if body, code := get(addr, "/readyz"); code == 200 && strings.HasPrefix(body, "mode=leader") {
			return log, stop
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve on %s not leader within 15s; log:\n%s", addr, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// get is a GET of path on addr: the body (or the error) and the status
// (0 on an error); it is routes_test.go's, the internal tests'.
var get = cli.Get

// readyz parses the key=value line of /readyz.
func readyz(t *testing.T, addr string) map[string]string {
	t.Helper()
	body, code := get(addr, "/readyz")
	if code != 200 {
		t.Fatalf("/readyz on %s: %d %s", addr, code, body)
	}
	m := map[string]string{}
	for _, kv := range strings.Fields(body) {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// TestJobsAddMany: jobs add -f takes a JSON array or NDJSON of jobs and
// creates them in one transaction; a repeat creates nothing; a file with one
// bad job creates none and names it.
func TestJobsAddMany(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "many.db")
	run(t, nil, "", "migrate", "--db", db).ok(t)
	var lines []string
	for i := range 25 {
		lines = append(lines, fmt.Sprintf(`{"name":"bulk-%02d","schedule":{"every":"%dm"},"action":{"http":{"url":"http://127.0.0.1:9/hook"}}}`, i, i+1))
	}
	var out struct {
		Created, Existing int
		Jobs              []struct {
			Name    string
			Created bool
		}
	}
	decode(t, run(t, nil, strings.Join(lines, "\n"), "jobs", "add", "--db", db, "-f", "-").ok(t), &out)
	if out.Created != 25 || out.Existing != 0 || len(out.Jobs) != 25 || out.Jobs[24].Name != "bulk-24" {
		t.Fatalf("NDJSON add: %+v", out)
	}
	arr := "[" + strings.Join(lines, ",") + "]"
	decode(t, run(t, nil, "", "jobs", "add", "--db", db, "-f", writeFile(t, "jobs.json", arr)).ok(t), &out)
	if out.Created != 0 || out.Existing != 25 {
		t.Fatalf("repeated array add: %+v", out)
	}
	bad := strings.Replace(strings.Join(append(lines, `{"name":"bulk-new","schedule":{"every":"1m"},"action":{"http":{"url":"http://127.0.0.1:9/hook"}}}`), "\n"),
		`"name":"bulk-03","schedule":{"every":"4m"}`, `"name":"bulk-03","schedule":{"every":"4 minutes"}`, 1)
	run(t, nil, bad, "jobs", "add", "--db", db, "-f", "-").oneLine(t, 2, "jobs[3]", "schedule.every")
	if names, _ := listNames(t, db, "--limit", "100"); len(names) != 25 {
		t.Fatalf("%d jobs after a refused file, want 25", len(names))
	}
}
