package faults

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/sqlite"
)

// execScript is an exec action that logs its start, works for 4 s in a
// process it starts and logs its end: "start|child|end <holder> <epoch>
// <pid>" lines in the file it is given (child: that process's pid).
const execScript = `#!/usr/bin/env bash
echo "start $SQLEASE_HOLDER $SQLEASE_EPOCH $$" >> "$1"
sleep 4 &
echo "child $SQLEASE_HOLDER $SQLEASE_EPOCH $!" >> "$1"
wait
echo "end $SQLEASE_HOLDER $SQLEASE_EPOCH $$" >> "$1"
`

// childOf waits for the pid of the process the command of start started.
func childOf(t *testing.T, log string, start execLine) int {
	t.Helper()
	return waitExec(t, log, "the command's child", 5*time.Second, func(l execLine) bool {
		return l.what == "child" && l.holder == start.holder && l.epoch == start.epoch
	}).pid
}

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

// waitExec waits up to timeout for a line of the exec log matching pred.
func waitExec(t *testing.T, log, what string, timeout time.Duration, pred func(execLine) bool) execLine {
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

// execFleet starts two nodes on one SQLite file in dir with the given
// dispatch, creates a one-off job running execScript, and returns once
// its command has started: its log, its start line and its node.
func execFleet(t *testing.T, dispatch string) (d *fleettest.Daemons, dir, log string, first execLine, victim *fleettest.Node) {
	t.Helper()
	dir = t.TempDir()
	script := filepath.Join(dir, "work.sh")
	log = filepath.Join(dir, "log")
	if err := os.WriteFile(script, []byte(execScript), 0o755); err != nil {
		t.Fatal(err)
	}
	d = fleettest.NewDaemons(t, bin, "sqlite:"+filepath.Join(dir, "sqlease.db"),
		"--dispatch", dispatch, "--poll-interval", refreshInterval.String(),
		"--lease-duration", leaseDuration.String(), "--renew-interval", renewInterval.String(),
		"--acquire-interval", acquireInterval.String(), "--shutdown-timeout", "5s")
	nodes := d.Start("n1", "n2")
	createJob(t, nodes[0], map[string]any{"name": "work", "schedule": map[string]any{},
		"action": map[string]any{"exec": map[string]any{"command": []string{"bash", script, log}, "timeout": "30s"}},
		"retry":  map[string]any{"max_attempts": 5, "backoff": "100ms"}})
	first = waitExec(t, log, "the command's start", 15*time.Second, func(l execLine) bool { return l.what == "start" })
	if victim = d.Node(first.holder); victim == nil {
		t.Fatalf("the command ran on %q, not a node of this fleet", first.holder)
	}
	return d, dir, log, first, victim
}

// TestExecActionDiesWithNode: kill -9 of the node running an exec action
// takes the command with it — it would otherwise work on, orphaned, while
// the next owner retries the occurrence, two executions at once (SPEC G3).
// Two nodes on one SQLite file, leader and claim dispatch.
func TestExecActionDiesWithNode(t *testing.T) {
	t.Parallel()
	for _, dispatch := range []string{"leader", "claim"} {
		t.Run(dispatch, func(t *testing.T) {
			d, _, log, first, victim := execFleet(t, dispatch)
			child := childOf(t, log, first) // mid-run: the command waits on it
			victim.Kill()
			killed := time.Now()
			for fleettest.Alive(first.pid) || fleettest.Alive(child) {
				if time.Since(killed) > 2*time.Second {
					t.Fatalf("the command (pid %d, alive %v) or its child (pid %d, alive %v) of %s lives on %v after its node's kill -9",
						first.pid, fleettest.Alive(first.pid), child, fleettest.Alive(child), first.holder, time.Since(killed).Round(time.Millisecond))
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("pids %d and %d gone %v after the kill -9 of %s", first.pid, child, time.Since(killed).Round(time.Millisecond), first.holder)
			again := waitExec(t, log, "the retry on the other node", claimFailover+10*time.Second, func(l execLine) bool {
				return l.what == "start" && l.holder != first.holder
			})
			waitExec(t, log, "the retry's end", 10*time.Second, func(l execLine) bool { return l.what == "end" && l.pid == again.pid })
			for _, l := range execLog(t, log) {
				if l.what == "end" && l.pid == first.pid {
					t.Errorf("the killed node's command worked on and ended: %+v", l)
				}
			}
			d.Shutdown(15*time.Second, d.Running()...)
		})
	}
}

// TestExecActionStopsWithFrozenNode: SIGSTOP of the node running an exec
// action past its lease. The frozen node cannot stop its command, which is
// a process of its own; the command's guard kills it at the run's acting
// deadline, before the other node retries the occurrence. Without the
// guard both would run at once.
func TestExecActionStopsWithFrozenNode(t *testing.T) {
	t.Parallel()
	for _, dispatch := range []string{"leader", "claim"} {
		t.Run(dispatch, func(t *testing.T) {
			d, dir, log, first, victim := execFleet(t, dispatch)
			admin, err := sqlite.Open(filepath.Join(dir, "sqlease.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			b := backend{dialect: "sqlite", writeLocked: fleettest.SQLiteWriteLocked, admin: admin}
			// Every 10 ms: is the frozen node's command alive, has the retry
			// begun? Seeing the retry while the command lives is an overlap.
			child := childOf(t, log, first)
			stopped := b.freeze(t, victim)
			var died, retried time.Time
			var again execLine
			for time.Since(stopped) < stopFor && (died.IsZero() || retried.IsZero()) {
				alive := fleettest.Alive(first.pid) || fleettest.Alive(child)
				if !alive && died.IsZero() {
					died = time.Now()
				}
				if retried.IsZero() {
					for _, l := range execLog(t, log) {
						if l.what == "start" && l.holder != first.holder {
							again, retried = l, time.Now()
							if alive {
								t.Errorf("OVERLAP: the retry %+v began while the frozen node's command (pid %d) or its child (pid %d) still ran", l, first.pid, child)
							}
						}
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
			if rest := stopFor - time.Since(stopped); rest > 0 {
				time.Sleep(rest)
			}
			victim.Cont()
			if died.IsZero() || retried.IsZero() {
				t.Fatalf("during the freeze (%v): the frozen node's command (pid %d) died after %v, the retry began after %v (0: not)",
					stopFor, first.pid, died.Sub(stopped), retried.Sub(stopped))
			}
			t.Logf("the frozen node's command died %v after the freeze; the retry was seen %v after it", died.Sub(stopped).Round(time.Millisecond), retried.Sub(stopped).Round(time.Millisecond))
			waitExec(t, log, "the retry's end", 10*time.Second, func(l execLine) bool { return l.what == "end" && l.pid == again.pid })
			for _, l := range execLog(t, log) {
				if l.what == "end" && l.pid == first.pid {
					t.Errorf("the frozen node's command worked on and ended: %+v", l)
				}
			}
			d.Shutdown(15*time.Second, d.Running()...)
		})
	}
}
