package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/mysql"
)

// TestLeastPrivilegePostgres: the grants of deploy/grants/postgres.sql,
// run as they are (role names and passwords replaced), are enough: the
// migrator migrates, and two `sqlease serve --migrate=false` nodes
// connected as the serving role run a job, fail over after kill -9 of the
// leader and run it on; the serving role cannot change the schema.
func TestLeastPrivilegePostgres(t *testing.T) {
	admin := postgresDB(t)(t) // a fresh database, as the administrator
	ctx := t.Context()
	u, dbname, suffix, grants := grantsFor(t, admin, "postgres.sql", 4)
	migrator, app := "sqlease_migrator_"+suffix, "sqlease_app_"+suffix
	script := strings.NewReplacer("sqlease_migrator", migrator, "sqlease_app", app,
		"DATABASE sqlease", "DATABASE "+pgx.Identifier{dbname}.Sanitize(),
		"change-me-migrator", "pw-"+suffix, "change-me-app", "pw-"+suffix).Replace(grants)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		for _, r := range []string{app, migrator} {
			_, _ = c.Exec(context.Background(), "DROP OWNED BY "+r+" CASCADE")
		}
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{dbname}.Sanitize()+" WITH (FORCE)")
		for _, r := range []string{app, migrator} {
			_, _ = c.Exec(context.Background(), "DROP ROLE IF EXISTS "+r)
		}
	})
	appURL := leastPrivilege(t, "postgres.sql", script, 6, func(stmt string) error { _, err := conn.Exec(ctx, stmt); return err },
		u, "pw-"+suffix, migrator, app)

	// The serving role cannot change the schema.
	appConn, err := pgx.Connect(ctx, appURL)
	if err != nil {
		t.Fatal(err)
	}
	defer appConn.Close(context.Background())
	for _, ddl := range []string{"CREATE TABLE sqlease_intruder (i int)", "ALTER TABLE sqlease_jobs ADD COLUMN intruder int", "DROP TABLE sqlease_runs"} {
		if _, err := appConn.Exec(ctx, ddl); err == nil || !strings.Contains(err.Error(), "permission denied") && !strings.Contains(err.Error(), "must be owner") {
			t.Errorf("%s as %s: %v, want permission denied", ddl, app, err)
		}
	}
}

// grantsFor is what a least-privilege test starts from: the fresh
// database admin (its URL and name), a random suffix of n bytes (hex) for
// this test's roles and their password, and deploy/grants/file's text.
func grantsFor(t *testing.T, admin, file string, n int) (u *url.URL, dbname, suffix, grants string) {
	t.Helper()
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	_, _ = rand.Read(b)
	text, err := os.ReadFile("../../deploy/grants/" + file)
	if err != nil {
		t.Fatal(err)
	}
	return u, strings.TrimPrefix(u.Path, "/"), hex.EncodeToString(b), string(text)
}

// leastPrivilege runs script (deploy/grants/file with this test's names)
// through execute, which must run at least least statements of it; then, on
// the database u names, with password pw, migrates as the migrator and
// runs leastPrivilegeFailover as the app. It returns the app's URL.
func leastPrivilege(t *testing.T, file, script string, least int, execute func(string) error, u *url.URL, pw, migrator, app string) string {
	t.Helper()
	if n := runScript(t, script, execute); n < least {
		t.Fatalf("ran %d statements of deploy/grants/%s: the file or its parse is broken", n, file)
	}
	as := func(role string) string {
		v := *u
		v.User = url.UserPassword(role, pw)
		return v.String()
	}
	if out, err := exec.Command(binary, "migrate", "--db", as(migrator)).CombinedOutput(); err != nil {
		t.Fatalf("sqlease migrate as %s: %v\n%s", migrator, err, out)
	}
	leastPrivilegeFailover(t, as(app), app)
	return as(app)
}

// leastPrivilegeFailover runs two nodes on db (the serving role's URL) with
// --migrate=false: a job runs, the leader is killed, the other node runs it
// on under a later epoch.
func leastPrivilegeFailover(t *testing.T, db, app string) {
	t.Helper()
	f := newFleet(t, db, "--migrate=false")
	nodes := f.start("a", "b")
	job := `{"name":"tick","schedule":{"every":"200ms"},"missed_runs":"skip","action":{"exec":{"command":["true"]}}}`
	if resp, body := nodes[0].do(t, "POST", "/v1/jobs", "", []byte(job)); resp.StatusCode != 201 {
		t.Fatalf("create as %s: %d %s", app, resp.StatusCode, body)
	}
	type run struct {
		Outcome, Holder string
		Epoch           int64
	}
	ranBy := func(via *node, epochAbove int64) (run, bool) {
		code, body := via.get("/v1/jobs/tick/runs?limit=20")
		if code != 200 {
			return run{}, false
		}
		var l struct{ Runs []run }
		if json.Unmarshal([]byte(body), &l) != nil {
			return run{}, false
		}
		for _, r := range l.Runs {
			if r.Outcome == "succeeded" && r.Epoch > epochAbove {
				return r, true
			}
		}
		return run{}, false
	}
	var first run
	if err := poll(20*time.Second, func() (bool, string) {
		var ok bool
		first, ok = ranBy(nodes[1], 0)
		return ok, "a succeeded run"
	}); err != nil {
		t.Fatal(err)
	}
	leader, other := holderOf(nodes, first.Holder)
	if leader == nil {
		t.Fatalf("run by %q, not a node of the fleet", first.Holder)
	}
	leader.Signal(syscall.SIGKILL)
	killed := time.Now()
	var after run
	if err := poll(30*time.Second, func() (bool, string) {
		var ok bool
		after, ok = ranBy(other, first.Epoch)
		return ok && after.Holder == other.holder, "a run by the surviving node under a later epoch"
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("as %s: runs by %s@%d, then after kill -9 by %s@%d within %s", app, first.Holder, first.Epoch, after.Holder, after.Epoch, time.Since(killed).Round(time.Millisecond))

}

// TestLeastPrivilegeMariaDB: the same with deploy/grants/mysql.sql on
// MariaDB (users at 127.0.0.1 instead of %, as the test server's).
func TestLeastPrivilegeMariaDB(t *testing.T) {
	admin := dbtest.MySQLURL(t)
	ctx := t.Context()
	u, dbname, suffix, grants := grantsFor(t, admin, "mysql.sql", 3)
	migrator, app := "sqlease_mig_"+suffix, "sqlease_app_"+suffix
	script := strings.NewReplacer("'sqlease_migrator'@'%'", "'"+migrator+"'@'127.0.0.1'", "'sqlease_app'@'%'", "'"+app+"'@'127.0.0.1'",
		" sqlease.*", " `"+dbname+"`.*", "change-me-migrator", "pw-"+suffix, "change-me-app", "pw-"+suffix).Replace(grants)
	db, err := mysql.Open(admin)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	t.Cleanup(func() {
		for _, user := range []string{migrator, app} {
			_, _ = db.ExecContext(context.Background(), "DROP USER IF EXISTS '"+user+"'@'127.0.0.1'")
		}
	})
	appURL := leastPrivilege(t, "mysql.sql", script, 4, func(stmt string) error { _, err := db.ExecContext(ctx, stmt); return err },
		u, "pw-"+suffix, migrator, app)
	appDB, err := mysql.Open(appURL)
	if err != nil {
		t.Fatal(err)
	}
	defer appDB.Close()
	for _, ddl := range []string{"CREATE TABLE sqlease_intruder (i int)", "ALTER TABLE sqlease_jobs ADD COLUMN intruder int", "DROP TABLE sqlease_runs"} {
		if _, err := appDB.ExecContext(ctx, ddl); err == nil || !strings.Contains(err.Error(), "denied") {
			t.Errorf("%s as %s: %v, want access denied", ddl, app, err)
		}
	}
}

// runScript runs each statement of an SQL script (statements end with ";"
// at the end of a line; "--" lines are comments) and returns how many ran.
func runScript(t *testing.T, script string, exec func(string) error) int {
	t.Helper()
	n := 0
	for _, stmt := range strings.Split(script, ";\n") {
		var lines []string
		for _, l := range strings.Split(stmt, "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "--") {
				lines = append(lines, l)
			}
		}
		if s := strings.TrimSpace(strings.Join(lines, "\n")); s != "" {
			if err := exec(s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
			n++
		}
	}
	return n
}
