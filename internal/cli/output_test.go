package cli_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/mysql"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/sqlite"
)

// TestRunOutput: a real node keeps each run's output with the run — a
// command's stdout and stderr (one stream, its tail at --run-output-limit,
// the dropped bytes marked), an HTTP response's status line and body — with
// the action's secrets redacted there and in the one-line error; GET
// /v1/jobs/{name}/runs and `sqlease jobs runs` show it; deleting the job
// deletes it; a node started with --run-output-limit 0 keeps none. On
// SQLite, PostgreSQL (leader and claim dispatch: the batched finish) and
// MariaDB.
func TestRunOutput(t *testing.T) {
	const secret = "s3cr3t-output-token"
	t.Setenv("SQLEASE_SECRET_OUTPUT_TEST", secret) // the node resolves it from its process
	type backend struct {
		name, dispatch string
		db             func(t *testing.T) (url string, open func() (*sql.DB, error))
	}
	sqliteDB := func(t *testing.T) (string, func() (*sql.DB, error)) {
		url, path := sqliteURL(t)
		return url, func() (*sql.DB, error) { return sqlite.Open(path) }
	}
	pgDB := func(t *testing.T) (string, func() (*sql.DB, error)) {
		url := postgresURL(t)
		return url, func() (*sql.DB, error) { return postgres.Open(url) }
	}
	mysqlDB := func(t *testing.T) (string, func() (*sql.DB, error)) {
		url := dbtest.MySQLURL(t)
		return url, func() (*sql.DB, error) { return mysql.Open(url) }
	}
	for _, b := range []backend{{"sqlite", "leader", sqliteDB}, {"postgres", "leader", pgDB}, {"postgres-claim", "claim", pgDB}, {"mariadb", "leader", mysqlDB}} {
		t.Run(b.name, func(t *testing.T) {
			db, open := b.db(t)
			testRunOutputNode(t, db, b.dispatch, secret, open)
		})
	}
}

func testRunOutputNode(t *testing.T, db, dispatch, secret string, open func() (*sql.DB, error)) {
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "token was %s\ntry later\n", r.Header.Get("Authorization"))
	}))
	t.Cleanup(hook.Close)
	const limit = 300
	addr := freeAddr(t)
	_, stop := startServe(t, addr, nil, "--db", db, "--http", addr, "--dispatch", dispatch, "--run-output-limit", fmt.Sprint(limit),
		"--lease-duration", "2s", "--renew-interval", "500ms", "--acquire-interval", "100ms", "--poll-interval", "50ms")
	// 40 lines of stdout and stderr, then the secret (passed as an
	// argument: the node's SQLEASE_* variables are not the command's).
	script := `i=0; while [ $i -lt 40 ]; do echo "out $i"; echo "err $i" >&2; i=$((i+1)); done; echo "token $1"; exit 3`
	jobs := []string{
		// One attempt each: a retry (the default policy retries a
		// failure after its backoff) would add a run and an output row
		// if the checks below come after it, as they did on a loaded
		// machine.
		fmt.Sprintf(`{"name": "chatty", "schedule": {}, "retry": {"max_attempts": 1}, "action": {"exec": {"command": ["sh", "-c", %q, "sh", %q]}}}`, script, secret),
		`{"name": "hook", "schedule": {}, "retry": {"max_attempts": 1}, "action": {"http": {"url": "` + hook.URL + `/", "headers": {"Authorization": {"env": "SQLEASE_SECRET_OUTPUT_TEST"}}}}}`,
		`{"name": "quiet", "schedule": {}, "action": {"exec": {"command": ["true"]}}}`,
	}
	run(t, nil, strings.Join(jobs, "\n"), "jobs", "add", "--db", db, "-f", "-").ok(t)

	chatty := finishedRun(t, addr, "chatty")
	marker, rest, ok := strings.Cut(chatty.output(), "\n")
	var dropped int
	if _, err := fmt.Sscanf(marker, "[… %d bytes dropped]", &dropped); err != nil || !ok {
		t.Errorf("chatty: output %q does not start with the dropped marker", chatty.output())
	}
	if len(rest) > limit || !strings.HasPrefix(strings.TrimPrefix(chatty.output(), marker+"\n"), rest) ||
		!strings.HasSuffix(rest, "out 39\nerr 39\ntoken [redacted]\n") || strings.Contains(chatty.output(), secret) {
		t.Errorf("chatty: output %q, want the last %d bytes of the stream, the secret redacted", chatty.output(), limit)
	}
	total := len("token "+secret+"\n") + 0
	for i := range 40 {
		total += len(fmt.Sprintf("out %d\nerr %d\n", i, i))
	}
	if kept := len(strings.ReplaceAll(rest, "[redacted]", secret)); dropped+kept != total {
		t.Errorf("chatty: %d bytes dropped + %d kept, want the %d written", dropped, kept, total)
	}
	if chatty.Outcome != "failed" || chatty.Error != "exec action: exit status 3: token [redacted]" {
		t.Errorf("chatty: outcome %s, error %q", chatty.Outcome, chatty.Error)
	}

	h := finishedRun(t, addr, "hook")
	if want := "HTTP/1.1 503 Service Unavailable\ntoken was [redacted]\ntry later\n"; h.output() != want {
		t.Errorf("hook: output %q, want %q", h.output(), want)
	}
	if want := "http action: POST: HTTP status 503 Service Unavailable: token was [redacted]…"; h.Error != want {
		t.Errorf("hook: error %q, want %q", h.Error, want)
	}
	if q := finishedRun(t, addr, "quiet"); q.Output != nil || q.Outcome != "succeeded" {
		t.Errorf("quiet: outcome %s, output %v; want succeeded and null", q.Outcome, q.Output)
	}

	// The command line shows the same, as JSON and as text.
	var list httpapi.RunList
	decode(t, run(t, nil, "", "jobs", "runs", "hook", "--db", db).ok(t), &list)
	if len(list.Runs) != 1 || list.Runs[0].Output == nil || *list.Runs[0].Output != h.output() {
		t.Errorf("jobs runs hook: %+v", list)
	}
	text := run(t, nil, "", "jobs", "runs", "chatty", "--db", db, "--text").ok(t).stdout
	if !strings.Contains(text, " attempt 1 failed ") || !strings.Contains(text, "\n    error: exec action: exit status 3") ||
		!strings.Contains(text, "\n    output:\n      [… ") || !strings.Contains(text, "\n      token [redacted]\n") {
		t.Errorf("jobs runs --text:\n%s", text)
	}
	if strings.Contains(text, secret) {
		t.Errorf("jobs runs --text shows the secret:\n%s", text)
	}
	if r := stop(); strings.Contains(r.stderr, secret) {
		t.Errorf("the node's log shows the secret:\n%s", r.stderr)
	}

	// Deleting a job deletes its output; the others' stays.
	sdb, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	count := func() int {
		var n int
		if err := sdb.QueryRow(`SELECT count(*) FROM sqlease_run_output`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 2 {
		t.Errorf("%d output rows, want 2 (chatty, hook)", n)
	}
	run(t, nil, "", "jobs", "delete", "chatty", "--db", db).ok(t)
	if n := count(); n != 1 {
		t.Errorf("%d output rows after deleting chatty, want 1", n)
	}

	// --run-output-limit 0 keeps none.
	addr = freeAddr(t)
	startServe(t, addr, nil, "--db", db, "--http", addr, "--dispatch", dispatch, "--run-output-limit", "0",
		"--lease-duration", "2s", "--renew-interval", "500ms", "--acquire-interval", "100ms", "--poll-interval", "50ms")
	run(t, nil, `{"name": "off", "schedule": {}, "action": {"exec": {"command": ["echo", "not kept"]}}}`, "jobs", "add", "--db", db, "-f", "-").ok(t)
	if r := finishedRun(t, addr, "off"); r.Output != nil || r.Outcome != "succeeded" {
		t.Errorf("off: outcome %s, output %q; want succeeded and none", r.Outcome, r.output())
	}
	if n := count(); n != 1 {
		t.Errorf("%d output rows after a run under --run-output-limit 0, want 1", n)
	}
}

type apiRun struct{ httpapi.Run }

func (r apiRun) output() string {
	if r.Output == nil {
		return ""
	}
	return *r.Output
}

// finishedRun waits until the job's one run has finished and returns it as
// GET /v1/jobs/{name}/runs shows it.
func finishedRun(t *testing.T, addr, job string) apiRun {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		body, code := get(addr, "/v1/jobs/"+job+"/runs")
		var list httpapi.RunList
		if code == 200 && json.Unmarshal([]byte(body), &list) == nil && len(list.Runs) == 1 && list.Runs[0].Outcome != "running" {
			return apiRun{list.Runs[0]}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no finished run within 20s: %d %s", job, code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
