//go:build unix

package action

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func runExec(t *testing.T, timeout time.Duration, argv ...string) error {
	t.Helper()
	return (Spec{Exec: &Exec{Command: argv, Timeout: Duration(timeout)}}).Run(context.Background(), testRun(t))
}

func TestExecEnvironment(t *testing.T) {
	t.Setenv("ACTION_TEST_PARENT", "inherited")
	t.Setenv("SQLEASE_API_TOKEN", "daemon-secret") // the daemon's own config
	t.Setenv("SQLEASE_JOB", "stale")
	out := filepath.Join(t.TempDir(), "env")
	script := `printf '%s\n' "$SQLEASE_IDEMPOTENCY_KEY" "$SQLEASE_JOB" "$SQLEASE_SCHEDULED_FOR" "$SQLEASE_ATTEMPT" "$SQLEASE_EPOCH" "$SQLEASE_HOLDER" "$ACTION_TEST_PARENT" "${SQLEASE_API_TOKEN-unset}" > "$1"; echo $SQLEASE_JOB`
	if err := runExec(t, 0, "sh", "-c", script, "sh", out); err != nil {
		t.Fatalf("Run = %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	want := []string{
		testRunValues["Idempotency-Key"], testRunValues["Sqlease-Job"], testRunValues["Sqlease-Scheduled-For"],
		testRunValues["Sqlease-Attempt"], testRunValues["Sqlease-Epoch"], testRunValues["Sqlease-Holder"],
		"inherited", "unset",
	}
	names := []string{"SQLEASE_IDEMPOTENCY_KEY", "SQLEASE_JOB", "SQLEASE_SCHEDULED_FOR", "SQLEASE_ATTEMPT", "SQLEASE_EPOCH", "SQLEASE_HOLDER", "ACTION_TEST_PARENT", "SQLEASE_API_TOKEN"}
	if len(got) != len(want) {
		t.Fatalf("environment dump %q, want %d lines", got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s = %q, want %q", names[i], got[i], want[i])
		}
	}
}

func TestExecNoShell(t *testing.T) {
	// The argument reaches the program as written: no expansion, no ";".
	if err := runExec(t, 0, "sh", "-c", `test "$0" = '$SQLEASE_JOB; false'`, "$SQLEASE_JOB; false"); err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestExecFailure(t *testing.T) {
	err := runExec(t, 0, "sh", "-c", "echo working; echo boom >&2; exit 3")
	if err == nil {
		t.Fatal("Run = nil, want an error")
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 3 {
		t.Errorf("error %v does not carry exit code 3", err)
	}
	if !strings.HasSuffix(err.Error(), "exit status 3: boom") || strings.Contains(err.Error(), "working") {
		t.Errorf("error %q, want exit status 3 and stderr (only)", err)
	}
	if errors.Is(err, ErrTimeout) {
		t.Error("a failure is not a timeout")
	}

	if err := runExec(t, 0, "false"); err == nil || !strings.HasSuffix(err.Error(), "exit status 1") {
		t.Errorf("Run(false) = %v, want exit status 1", err)
	}
	if err := runExec(t, 0, "/nonexistent/program"); err == nil || !strings.Contains(err.Error(), "start") {
		t.Errorf("Run(missing program) = %v, want a start error", err)
	}
}

func TestExecStderrTail(t *testing.T) {
	err := runExec(t, 0, "sh", "-c", `head -c 3000 /dev/zero | tr '\0' x >&2; echo THE-END >&2; exit 1`)
	if err == nil {
		t.Fatal("Run = nil, want an error")
	}
	_, tail, ok := strings.Cut(err.Error(), "exit status 1: ")
	if !ok || !strings.HasPrefix(tail, "…x") || !strings.HasSuffix(tail, "xTHE-END") {
		t.Errorf("error %q, want the marked tail of stderr", err)
	}
	if n := len(strings.TrimPrefix(tail, "…")); n > MaxErrorOutput {
		t.Errorf("error carries %d bytes of stderr, want at most %d", n, MaxErrorOutput)
	}
}

func TestExecTimeoutKills(t *testing.T) {
	start := time.Now()
	err := runExec(t, 200*time.Millisecond, "sleep", "10")
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Run = %v, want ErrTimeout", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("a 200ms timeout took %s", took)
	}
}

// TestExecTimeoutKillsGroup: a child the command started dies with it.
func TestExecTimeoutKillsGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	err := runExec(t, 300*time.Millisecond, "sh", "-c", `sleep 30 & echo $! > "$1"; wait`, "sh", pidFile)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Run = %v, want ErrTimeout", err)
	}
	waitGone(t, readPid(t, pidFile))
}

// TestExecExitKillsLeftovers: what a command leaves running when it exits
// is killed, and does not delay the run even if it holds stderr open.
func TestExecExitKillsLeftovers(t *testing.T) {
	for name, script := range map[string]string{
		"detached from stderr": `sleep 30 >/dev/null 2>&1 & echo $! > "$1"`,
		"holding stderr":       `sleep 30 & echo $! > "$1"`,
	} {
		t.Run(name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			start := time.Now()
			if err := runExec(t, 20*time.Second, "sh", "-c", script, "sh", pidFile); err != nil {
				t.Fatalf("Run = %v", err)
			}
			if took := time.Since(start); took > stderrGrace {
				t.Errorf("Run took %s", took)
			}
			waitGone(t, readPid(t, pidFile))
		})
	}
}

// TestExecEscapedChildDoesNotBlock: a process that left the group (setsid)
// and holds stderr delays the run by stderrGrace at most.
func TestExecEscapedChildDoesNotBlock(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	err := runExec(t, 20*time.Second, "sh", "-c", `setsid sh -c 'echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; exec sleep 30' sh "$1" &
		while [ ! -s "$1" ]; do sleep 0.01; done; echo bye >&2; exit 2`, "sh", pidFile)
	pid := readPid(t, pidFile)
	defer func() { _ = syscall.Kill(pid, syscall.SIGKILL) }()
	if err == nil || !strings.HasSuffix(err.Error(), "exit status 2: bye") {
		t.Errorf("Run = %v, want exit status 2: bye", err)
	}
	if took := time.Since(start); took < stderrGrace || took > stderrGrace+2*time.Second {
		t.Errorf("Run took %s, want about stderrGrace (%s)", took, stderrGrace)
	}
	if processGone(pid) {
		t.Errorf("the escaped process %d was killed: the test did not test an escape", pid)
	}
}

func TestExecCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	err := (Spec{Exec: &Exec{Command: []string{"sleep", "10"}, Timeout: Duration(time.Minute)}}).Run(ctx, testRun(t))
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Errorf("Run = %v, want context.Canceled and not ErrTimeout", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("cancel took %s", took)
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitGone waits until pid no longer runs (gone, or a zombie awaiting its
// reaper), failing after a few seconds.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		if processGone(pid) {
			return
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d still running", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func processGone(pid int) bool {
	if stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		// pid (comm) state …: the state follows the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
	} else if _, statErr := os.Stat("/proc/self/stat"); statErr == nil {
		return true // /proc works and the process is not in it
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
