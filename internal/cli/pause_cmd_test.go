package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// jobs pause takes a reason and a name prefix as the API does
// (POST /v1/jobs/{name}/pause, /v1/jobs:pause, :resume), and the --text
// views show the reason and the breaker.
func TestPauseReasonPrefixAndBreakerText(t *testing.T) {
	db, _ := sqliteURL(t)
	run(t, nil, "", "migrate", "--db", db).ok(t)
	for _, j := range []string{
		`{"name": "tenant-a.sync", "schedule": {"every": "1h"}, "action": {"exec": {"command": ["true"]}}, "breaker": {"failures": 5, "cool_down": "1m"}}`,
		`{"name": "tenant-a.report", "schedule": {"every": "1h"}, "action": {"exec": {"command": ["true"]}}}`,
		`{"name": "tenant-b.sync", "schedule": {"every": "1h"}, "action": {"exec": {"command": ["true"]}}}`,
	} {
		run(t, nil, j, "jobs", "add", "--db", db, "-f", "-").ok(t)
	}

	// A bad call changes nothing.
	for _, args := range [][]string{
		{"jobs", "pause", "tenant-a.sync", "--prefix", "tenant-a."},
		{"jobs", "pause"},
		{"jobs", "resume", "a", "b"},
		{"jobs", "pause", "--prefix", "bad%prefix"},
		{"jobs", "pause", "tenant-a.sync", "--reason", strings.Repeat("x", 513)},
	} {
		if r := run(t, nil, "", append(args, "--db", db)...); r.code == 0 {
			t.Errorf("%q: want an error, got %v", args, r)
		}
	}

	out := run(t, nil, "", "jobs", "pause", "--prefix", "tenant-a.", "--reason", "vendor outage INC-42", "--db", db).ok(t).stdout
	var n struct{ Paused *int64 }
	if err := json.Unmarshal([]byte(out), &n); err != nil || n.Paused == nil || *n.Paused != 2 {
		t.Fatalf("pause --prefix: %q (%v)", out, err)
	}
	out = run(t, nil, "", "jobs", "list", "--text", "--db", db).ok(t).stdout
	rows := columnsAligned(t, out, "NAME", "STATE", "SCHEDULE", "NEXT RUN AT", "LAST RUN AT", "ATTEMPTS", "LOCKED BY", "BREAKER")
	if len(rows) != 4 || !strings.HasPrefix(rows[2], "tenant-a.sync    paused") || !strings.Contains(rows[2], "closed 0/5 cool-down 1m0s") ||
		!strings.HasPrefix(rows[3], "tenant-b.sync    active") {
		t.Errorf("jobs list --text:\n%s", out)
	}
	if !strings.Contains(out, "paused tenant-a.report: vendor outage INC-42\n") || !strings.Contains(out, "paused tenant-a.sync: vendor outage INC-42\n") {
		t.Errorf("jobs list --text does not give the reasons:\n%s", out)
	}
	out = run(t, nil, "", "jobs", "get", "--text", "tenant-a.sync", "--db", db).ok(t).stdout
	if !strings.Contains(out, "pause reason:  vendor outage INC-42") || !strings.Contains(out, "breaker:       closed 0/5 cool-down 1m0s") ||
		!strings.Contains(out, "overlap:       wait\n") {
		t.Errorf("jobs get --text:\n%s", out)
	}

	out = run(t, nil, "", "jobs", "resume", "--prefix", "tenant-a.", "--db", db).ok(t).stdout
	var r struct{ Resumed *int64 }
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Resumed == nil || *r.Resumed != 2 {
		t.Fatalf("resume --prefix: %q (%v)", out, err)
	}
	out = run(t, nil, "", "jobs", "pause", "tenant-b.sync", "--reason", "moved", "--db", db).ok(t).stdout
	if !strings.Contains(out, `"pause_reason": "moved"`) {
		t.Errorf("jobs pause NAME --reason:\n%s", out)
	}
	out = run(t, nil, "", "jobs", "list", "--text", "--db", db).ok(t).stdout
	if strings.Contains(out, "tenant-a") && strings.Contains(out, "paused tenant-a") || !strings.Contains(out, "paused tenant-b.sync: moved\n") {
		t.Errorf("after resume --prefix:\n%s", out)
	}
}
