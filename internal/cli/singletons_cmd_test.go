package cli_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// sqlease singletons administers daemon singletons in the database, with
// the API's JSON; bad definitions are usage errors and change nothing.
func TestSingletonsCommand(t *testing.T) {
	db, _ := sqliteURL(t)
	run(t, nil, "", "migrate", "--db", db).ok(t)
	def := `{"name":"ingest","command":["sleep","60"],"initial_state":{"cursor":0},"heartbeat":"30s"}`
	out := run(t, nil, def, "singletons", "add", "-f", "-", "--db", db).ok(t)
	var s struct {
		Name, Status string
		State        json.RawMessage
	}
	var state bytes.Buffer
	err := json.Unmarshal([]byte(out.stdout), &s)
	if err == nil {
		err = json.Compact(&state, s.State)
	}
	if err != nil || s.Name != "ingest" || s.Status != "unplaced" || state.String() != `{"cursor":0}` {
		t.Fatalf("add: %+v %v\n%s", s, err, out)
	}
	again := run(t, nil, def, "singletons", "add", "-f", "-", "--db", db).ok(t)
	if !strings.Contains(again.stderr, "already exists with the same content") {
		t.Errorf("identical add: %s", again)
	}
	run(t, nil, strings.Replace(def, "60", "61", 1), "singletons", "add", "-f", "-", "--db", db)
	run(t, nil, `{"name":"bad","command":[]}`, "singletons", "add", "-f", "-", "--db", db).usage(t, "command")
	if l := run(t, nil, "", "singletons", "list", "--db", db).ok(t); strings.Count(l.stdout, `"name"`) != 1 {
		t.Fatalf("list: %s", l)
	}
	if p := run(t, nil, "", "singletons", "pause", "ingest", "--db", db).ok(t); !strings.Contains(p.stdout, `"status": "paused"`) {
		t.Fatalf("pause: %s", p)
	}
	run(t, nil, "", "singletons", "resume", "ingest", "--db", db).ok(t)
	if st := run(t, nil, "", "status", "--db", db).ok(t); !strings.Contains(st.stdout, "SINGLETON") || !strings.Contains(st.stdout, "ingest") {
		t.Fatalf("status: %s", st)
	}
	run(t, nil, "", "singletons", "delete", "ingest", "--db", db).ok(t)
	if g := run(t, nil, "", "singletons", "get", "ingest", "--db", db); g.code == 0 {
		t.Fatalf("get after delete: %s", g)
	}
}

// sqlease singletons list pages like jobs list: --limit gives one page with
// next, --after continues, and without --limit every singleton is listed
// (read a page at a time).
func TestSingletonsListPages(t *testing.T) {
	db, _ := sqliteURL(t)
	run(t, nil, "", "migrate", "--db", db).ok(t)
	for _, name := range []string{"c", "a", "b"} {
		run(t, nil, `{"name":"`+name+`","command":["sleep","60"]}`, "singletons", "add", "-f", "-", "--db", db).ok(t)
	}
	list := func(args ...string) (names []string, next string) {
		t.Helper()
		out := run(t, nil, "", append([]string{"singletons", "list", "--db", db}, args...)...).ok(t)
		var l struct {
			Singletons []struct{ Name string }
			Next       string
		}
		if err := json.Unmarshal([]byte(out.stdout), &l); err != nil {
			t.Fatalf("list %v: %v\n%s", args, err, out)
		}
		for _, s := range l.Singletons {
			names = append(names, s.Name)
		}
		return names, l.Next
	}
	if names, next := list("--limit", "2"); strings.Join(names, ",") != "a,b" || next != "b" {
		t.Fatalf("--limit 2: %v next %q", names, next)
	}
	if names, next := list("--limit", "2", "--after", "b"); strings.Join(names, ",") != "c" || next != "" {
		t.Fatalf("--after b: %v next %q", names, next)
	}
	if names, next := list(); strings.Join(names, ",") != "a,b,c" || next != "" {
		t.Fatalf("all: %v next %q", names, next)
	}
	run(t, nil, "", "singletons", "list", "--limit", "1001", "--db", db).usage(t, "limit")
}
