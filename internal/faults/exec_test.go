package faults

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/fleettest"
)

// execScript is an exec action that logs its start, works for 4 s and logs
// its end: "start|end <holder> <epoch> <pid>" lines in the file it is given.
const execScript = `#!/usr/bin/env bash
echo "start $SQLEASE_HOLDER $SQLEASE_EPOCH $$" >> "$1"
sleep 4
echo "end $SQLEASE_HOLDER $SQLEASE_EPOCH $$" >> "$1"
`

type execLine struct {
	what, holder string
	epoch        int64
	pid          int
}

func execLog(t *testing.T, file string) []execLine {
	t.Helper()
	b, _ := os.ReadFile(file)
	var out []execLine
	lines := strings.Split(string(b), "\n")
	for _, l := range lines[:len(lines)-1] {
		f := strings.Fields(l)
		if len(f) != 4 {
			t.Fatalf("exec log line %q", l)
		}
		e, _ := strconv.ParseInt(f[2], 10, 64)
		pid, _ := strconv.Atoi(f[3])
		out = append(out, execLine{f[0], f[1], e, pid})
	}
	return out
}

// TestExecActionDiesWithNode: kill -9 of the node running an exec action
// takes the command with it — it would otherwise work on, orphaned, while
// the next owner retries the occurrence, two executions at once (SPEC G3).
// Two nodes on one SQLite file, leader and claim dispatch.
func TestExecActionDiesWithNode(t *testing.T) {
	t.Parallel()
	for _, dispatch := range []string{"leader", "claim"} {
		t.Run(dispatch, func(t *testing.T) {
			dir := t.TempDir()
			script, log := filepath.Join(dir, "work.sh"), filepath.Join(dir, "log")
			if err := os.WriteFile(script, []byte(execScript), 0o755); err != nil {
				t.Fatal(err)
			}
			d := fleettest.NewDaemons(t, bin, "sqlite:"+filepath.Join(dir, "sqlease.db"),
				"--dispatch", dispatch, "--poll-interval", refreshInterval.String(),
				"--lease-duration", leaseDuration.String(), "--renew-interval", renewInterval.String(),
				"--acquire-interval", acquireInterval.String(), "--shutdown-timeout", "5s")
			nodes := d.Start("n1", "n2")
			createJob(t, nodes[0], map[string]any{"name": "work", "schedule": map[string]any{},
				"action": map[string]any{"exec": map[string]any{"command": []string{"bash", script, log}, "timeout": "30s"}},
				"retry":  map[string]any{"max_attempts": 5, "backoff": "100ms"}})
			wait := func(what string, timeout time.Duration, pred func(execLine) bool) execLine {
				t.Helper()
				for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
					for _, l := range execLog(t, log) {
						if pred(l) {
							return l
						}
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s within %v: log %v", what, timeout, execLog(t, log))
					}
				}
			}
			first := wait("the command's start", 15*time.Second, func(l execLine) bool { return l.what == "start" })
			victim := d.Node(first.holder)
			if victim == nil {
				t.Fatalf("the command ran on %q, not a node of this fleet", first.holder)
			}
			time.Sleep(500 * time.Millisecond)
			victim.Kill()
			killed := time.Now()
			for fleettest.Alive(first.pid) {
				if time.Since(killed) > 2*time.Second {
					t.Fatalf("the command (pid %d) of %s lives on %v after its node's kill -9", first.pid, first.holder, time.Since(killed).Round(time.Millisecond))
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("pid %d gone %v after the kill -9 of %s", first.pid, time.Since(killed).Round(time.Millisecond), first.holder)
			again := wait("the retry on the other node", claimFailover+10*time.Second, func(l execLine) bool {
				return l.what == "start" && l.holder != first.holder
			})
			wait("the retry's end", 10*time.Second, func(l execLine) bool { return l.what == "end" && l.pid == again.pid })
			for _, l := range execLog(t, log) {
				if l.what == "end" && l.pid == first.pid {
					t.Errorf("the killed node's command worked on and ended: %+v", l)
				}
			}
			d.Shutdown(15*time.Second, d.Running()...)
		})
	}
}
