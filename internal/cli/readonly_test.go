package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// readCommands are the commands that read the nodes' database.
var readCommands = [][]string{
	{"status"}, {"status", "--history"}, {"jobs", "list"}, {"jobs", "get", "x"}, {"jobs", "runs", "x"},
	{"singletons", "list"}, {"singletons", "get", "x"},
}

// Run where no database is (another directory, a mistyped --db), a reading
// command fails with one line naming the path and --db, exit 2, and leaves
// no empty database behind. They used to create sqlease.db and fail with
// "no such table: sqlease_leases".
func TestReadCommandsCreateNoDatabase(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	missing := filepath.Join(t.TempDir(), "typo.db")
	for _, args := range readCommands {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			// The default --db: sqlease.db in the working directory.
			run(t, nil, "", args...).usage(t, "no database at sqlite:sqlease.db", filepath.Join(dir, "sqlease.db"), "--db")
			run(t, nil, "", append(args, "--db", "sqlite:"+missing)...).usage(t, "no database at sqlite:"+missing, "--db")
			run(t, map[string]string{"SQLEASE_DB": "sqlite:" + missing}, "", args...).usage(t, missing, "--db")
		})
	}
	for _, p := range []string{filepath.Join(dir, "sqlease.db"), missing} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("a reading command created %s", p)
		}
	}
	// A file that is not a sqlease database (an empty one an older version
	// left behind): the same, naming the missing table and migrate.
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, nil, "", "jobs", "list", "--db", "sqlite:"+empty).usage(t, empty, "no table sqlease_leases", "--db", "sqlease migrate")
	// migrate (and serve) still create it.
	db := "sqlite:" + filepath.Join(dir, "new.db")
	run(t, nil, "", "migrate", "--db", db).ok(t)
	run(t, nil, "", "jobs", "list", "--db", db).ok(t)
}

// columnsAligned checks that in every line of a table the header's columns
// start at the same offset, and returns the table's lines.
func columnsAligned(t *testing.T, out string, header ...string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, header[0]) && strings.Contains(l, header[len(header)-1]) {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("no header %v in:\n%s", header, out)
	}
	var offsets []int
	for _, h := range header {
		offsets = append(offsets, strings.Index(lines[start], h))
	}
	var table []string
	for _, l := range lines[start:] {
		if l == "" {
			break
		}
		table = append(table, l)
		runes := []rune(l)
		for k, off := range offsets[1:] {
			// The column's cell starts at the header's offset, after a
			// blank (runes: times and names are ASCII, dashes too).
			at := utf8.RuneCountInString(lines[start][:off])
			if at >= len(runes) || runes[at] == ' ' || runes[at-1] != ' ' {
				t.Errorf("column %s (%d) not aligned in %q\n%s", header[k+1], at, l, out)
			}
		}
	}
	return table
}

// Every list has a --text table with aligned columns: jobs list,
// singletons list, status, status --history.
func TestTextTables(t *testing.T) {
	db, _ := sqliteURL(t)
	run(t, nil, "", "migrate", "--db", db).ok(t)
	for _, j := range []string{
		`{"name": "hourly-report", "schedule": {"every": "1h"}, "action": {"exec": {"command": ["true"]}}}`,
		`{"name": "n", "schedule": {"cron": "0 12 * * *", "timezone": "Europe/Paris"}, "action": {"http": {"url": "http://127.0.0.1:9/hook"}}}`,
	} {
		run(t, nil, j, "jobs", "add", "--db", db, "-f", "-").ok(t)
	}
	run(t, nil, `{"name":"ingest","command":["sleep","60"]}`, "singletons", "add", "-f", "-", "--db", db).ok(t)

	out := run(t, nil, "", "jobs", "list", "--text", "--db", db).ok(t).stdout
	rows := columnsAligned(t, out, "NAME", "STATE", "SCHEDULE", "NEXT RUN AT", "LAST RUN AT", "ATTEMPTS", "LOCKED BY")
	if len(rows) != 3 || !strings.HasPrefix(rows[1], "hourly-report  active  every 1h0m0s") || !strings.Contains(rows[2], "cron 0 12 * * * Europe/Paris") {
		t.Errorf("jobs list --text:\n%s", out)
	}
	out = run(t, nil, "", "jobs", "list", "--text", "--limit", "1", "--db", db).ok(t).stdout
	if !strings.HasSuffix(out, "more: --after hourly-report\n") {
		t.Errorf("jobs list --text --limit 1:\n%s", out)
	}
	out = run(t, nil, "", "jobs", "get", "--text", "hourly-report", "--db", db).ok(t).stdout
	if !strings.Contains(out, "schedule:      every 1h0m0s") || !strings.Contains(out, "no runs") {
		t.Errorf("jobs get --text:\n%s", out)
	}
	out = run(t, nil, "", "singletons", "list", "--text", "--db", db).ok(t).stdout
	if rows := columnsAligned(t, out, "NAME", "STATUS", "HOLDER", "EPOCH", "HEARTBEAT AT", "STATE SAVED AT", "RESTARTS"); len(rows) != 2 || !strings.HasPrefix(rows[1], "ingest  unplaced") {
		t.Errorf("singletons list --text:\n%s", out)
	}
	out = run(t, nil, "", "status", "--text", "--history", "--db", db).ok(t).stdout
	columnsAligned(t, out, "LEASE", "HOLDER", "EPOCH", "EXPIRES AT", "TIME LEFT")
	columnsAligned(t, out, "AT", "EVENT", "HOLDER", "EPOCH", "REASON")
	columnsAligned(t, out, "SINGLETON", "STATUS", "HOLDER", "EPOCH", "HEARTBEAT AT", "RESTARTS")
	// JSON stays the default of the lists.
	if out := run(t, nil, "", "jobs", "list", "--db", db).ok(t).stdout; !strings.HasPrefix(out, "{") {
		t.Errorf("jobs list without --text is not JSON:\n%s", out)
	}
}
