package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A daemon singleton in a crash loop says so: a command that does not
// exist, and a script that exits at once with a last line, show status
// failing with last_error (the reason, the exit status and the last line
// of the output) on every node; a healthy one shows no restart but for
// its moves (one start per term). Before, both showed "starting" for ever with a climbing
// restart count, the reason only on the node's stderr, and a first start
// showed restarts 1.
func TestSingletonCrashLoopIsFailing(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "boom.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho starting up\necho \"boom: no config at /etc/nope\" >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, sqliteDB(t))
	nodes := f.start("a", "b")
	for _, def := range []string{
		`{"name":"missing","command":["/nonexistent/ingest"],"heartbeat":"30s","stop_timeout":"1s"}`,
		fmt.Sprintf(`{"name":"boom","command":["sh",%q],"heartbeat":"30s","stop_timeout":"1s"}`, script),
		`{"name":"fine","command":["sleep","3600"],"heartbeat":"30s","stop_timeout":"1s"}`,
	} {
		if resp, body := nodes[0].do(t, "POST", "/v1/singletons", "", []byte(def)); resp.StatusCode != 201 {
			t.Fatalf("create: %d %s", resp.StatusCode, body)
		}
	}
	for _, c := range []struct{ name, want string }{
		{"missing", `start "/nonexistent/ingest"`},
		{"boom", "exit status 3: boom: no config at /etc/nope"},
	} {
		for _, via := range nodes {
			var v singletonView
			if err := poll(30*time.Second, func() (bool, string) {
				via.getJSON(t, "/v1/singletons/"+c.name, &v)
				return v.Status == "failing", fmt.Sprintf("%+v", v)
			}); err != nil {
				t.Fatalf("%s through %s: %v", c.name, via.holder, err)
			}
			if !strings.Contains(v.LastError, c.want) || v.LastErrorAt == "" || v.Restarts < 2 {
				t.Fatalf("%s through %s: last_error %q at %q, restarts %d; want %q and at least 2 restarts", c.name, via.holder,
					v.LastError, v.LastErrorAt, v.Restarts, c.want)
			}
		}
	}
	var v singletonView
	if err := poll(20*time.Second, func() (bool, string) {
		nodes[1].getJSON(t, "/v1/singletons/fine", &v)
		return v.Status == "starting" && v.Holder != "" || v.Status == "running", fmt.Sprintf("%+v", v)
	}); err != nil {
		t.Fatal(err)
	}
	// One start per term (epoch): the first is no restart, a handover to
	// even out the fleet is one.
	if v.Restarts != v.Epoch-1 || v.LastError != "" {
		t.Fatalf("a healthy singleton at epoch %d: restarts %d, last_error %q", v.Epoch, v.Restarts, v.LastError)
	}
	// The listing says the same.
	for _, s := range nodes[1].singletons(t) {
		if (s.Name == "missing" || s.Name == "boom") && (s.Status != "failing" || s.LastError == "") {
			t.Fatalf("listed: %+v", s)
		}
	}
}
