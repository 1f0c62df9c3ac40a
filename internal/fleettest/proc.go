package fleettest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is one real OS process of a fleet: a worker (Fleet) or a daemon node
// (Node). Its methods that take no testing.TB must be called from the test
// goroutine (they may call t.Fatal).
type Proc struct {
	t      testing.TB
	name   string // prefix of failure messages
	Idx    int    // position in its fleet
	Holder string // its holder id
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	errLog string // path of the process's stderr

	done    chan struct{} // closed once the process has exited and its output is read
	exitErr error

	mu       sync.Mutex
	killed   bool      // the test sent SIGKILL
	killedAt time.Time // when
	termed   bool      // the test sent SIGTERM
}

// startProc starts cmd and calls line for each line it prints (from one
// goroutine), then exited once the process has exited. A worker's lines are
// its stdout, and its stderr goes to dir/<holder>.stderr; a daemon's lines
// (logStderr) are its stderr, also copied to that file, and its stdout is
// discarded. The process is SIGKILLed should the test process die.
func startProc(t testing.TB, name, dir string, idx int, holder string, cmd *exec.Cmd, daemon bool, line func([]byte), exited func(error)) (*Proc, error) {
	errLog, err := os.Create(filepath.Join(dir, holder+".stderr"))
	if err != nil {
		return nil, err
	}
	var lines io.Reader
	if daemon {
		if lines, err = cmd.StderrPipe(); err != nil {
			errLog.Close()
			return nil, err
		}
	} else {
		defer errLog.Close()
		cmd.Stderr = errLog
		if lines, err = cmd.StdoutPipe(); err != nil {
			return nil, err
		}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &Proc{t: t, name: name, Idx: idx, Holder: holder, cmd: cmd, stdin: stdin, errLog: errLog.Name(), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", holder, err)
	}
	go func() {
		sc := bufio.NewScanner(lines)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if daemon {
				_, _ = errLog.Write(append(sc.Bytes(), '\n'))
			}
			line(sc.Bytes())
		}
		if daemon {
			_, _ = io.Copy(errLog, lines)
			errLog.Close()
		}
		p.exitErr = cmd.Wait()
		close(p.done)
		exited(p.exitErr)
	}()
	return p, nil
}

// killOnCleanup kills every process of procs still running; it is what a
// fleet's cleanup does first.
func killOnCleanup(t testing.TB, procs []*Proc) {
	for _, p := range procs {
		if !p.Exited() {
			p.signal(syscall.SIGKILL)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				t.Errorf("%s (pid %d) did not die after SIGKILL", p.Holder, p.PID())
			}
		}
	}
}

// Send writes a command line to the process's stdin.
func (p *Proc) Send(cmd string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		p.t.Fatalf("%s: sending %q to %s: %v", p.name, cmd, p.Holder, err)
	}
}

// PID returns the process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitErr is what exec.Cmd.Wait returned; nil until the process exited.
func (p *Proc) ExitErr() error {
	if !p.Exited() {
		return nil
	}
	return p.exitErr
}

// Signal sends sig (SIGKILL and SIGTERM are remembered, and continue a
// stopped process first). Safe from any goroutine.
func (p *Proc) Signal(sig syscall.Signal) { p.signal(sig) }

// Status describes how the process ended: "running", "killed by <signal>"
// or its exit code.
func (p *Proc) Status() string {
	if !p.Exited() {
		return "running"
	}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by " + ws.Signal().String()
	}
	return strconv.Itoa(p.cmd.ProcessState.ExitCode())
}

func (p *Proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	switch sig {
	case syscall.SIGKILL:
		if !p.killed {
			p.killed, p.killedAt = true, time.Now()
		}
	case syscall.SIGTERM:
		p.termed = true
	}
	p.mu.Unlock()
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		_ = syscall.Kill(p.PID(), syscall.SIGCONT) // a stopped process must run to die cleanly
	}
	_ = syscall.Kill(p.PID(), sig)
}

// Kill sends SIGKILL.
func (p *Proc) Kill() { p.signal(syscall.SIGKILL) }

// KillWait sends SIGKILL and waits up to timeout for the process to exit;
// it fails the test if the process survives.
func (p *Proc) KillWait(timeout time.Duration) {
	p.t.Helper()
	p.Kill()
	if !p.WaitExit(timeout) {
		p.t.Fatalf("%s: %s (pid %d) survived SIGKILL for %v", p.name, p.Holder, p.PID(), timeout)
	}
}

// Term sends SIGTERM (graceful shutdown: release the lease and exit 0).
func (p *Proc) Term() { p.signal(syscall.SIGTERM) }

// Stop sends SIGSTOP.
func (p *Proc) Stop() { p.signal(syscall.SIGSTOP) }

// Cont sends SIGCONT.
func (p *Proc) Cont() { p.signal(syscall.SIGCONT) }

// Killed reports whether the test SIGKILLed the process.
func (p *Proc) Killed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

// KilledAt returns when the test SIGKILLed the process (zero if it did
// not): nothing the process started can still be running after it.
func (p *Proc) KilledAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killedAt
}

// State returns the process state letter from /proc/<pid>/stat ("R", "S",
// "T" for stopped, …) or "" if it cannot be read.
func (p *Proc) State() string { return ProcState(p.PID()) }

// ProcState returns the state letter of the process pid from
// /proc/<pid>/stat, or "" if it cannot be read.
func ProcState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// pid (comm) state …; comm may contain spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// WaitStopped waits until the process is in the stopped state.
func (p *Proc) WaitStopped(timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if st := p.State(); st == "T" || st == "t" {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: %s (pid %d) not stopped after %v (state %q)", p.name, p.Holder, p.PID(), timeout, p.State())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// WaitExit waits for the process to exit and reports whether it did in time.
func (p *Proc) WaitExit(timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Stderr returns what the process wrote to stderr so far.
func (p *Proc) Stderr() string {
	b, _ := os.ReadFile(p.errLog)
	return string(b)
}

// check reports a data race or panic on the process's stderr, and a
// non-zero exit after a SIGTERM that was not followed by a SIGKILL.
func (p *Proc) check(t testing.TB) {
	t.Helper()
	b := p.Stderr()
	if strings.Contains(b, "DATA RACE") || strings.Contains(b, "panic:") {
		t.Errorf("%s: stderr reports a data race or panic:\n%s", p.Holder, Tail(b, 8<<10))
	}
	p.mu.Lock()
	killed, termed := p.killed, p.termed
	p.mu.Unlock()
	if p.Exited() && termed && !killed && p.exitErr != nil {
		t.Errorf("%s: exit after SIGTERM: %v (want status 0)", p.Holder, p.exitErr)
	}
}

// shutdown sends SIGTERM to procs (those not sent one already) and waits
// for them to exit; one that does not within timeout is killed and the test
// fails.
func shutdown(t testing.TB, name string, timeout time.Duration, procs []*Proc) {
	t.Helper()
	for _, p := range procs {
		// One already sent SIGTERM may be past its signal handling, on its
		// way out: a second one would kill it (an unclean exit).
		p.mu.Lock()
		termed := p.termed
		p.mu.Unlock()
		if !p.Exited() && !termed {
			p.Term()
		}
	}
	for _, p := range procs {
		if !p.WaitExit(timeout) {
			t.Errorf("%s: %s (pid %d) did not exit within %v of SIGTERM; killing it", name, p.Holder, p.PID(), timeout)
			p.Kill()
			p.WaitExit(10 * time.Second)
		}
	}
}

// logStderr logs the process's warnings and errors (slog text or JSON
// lines at level WARN or ERROR) and the tail of its stderr.
func (p *Proc) logStderr(t testing.TB) {
	out := p.Stderr()
	var warn []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") ||
			strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
			warn = append(warn, line)
		}
	}
	if len(warn) > 200 {
		warn = append(warn[:100], append([]string{"…"}, warn[len(warn)-100:]...)...)
	}
	t.Logf("%s: %s (pid %d) warnings and errors:\n%s", p.name, p.Holder, p.PID(), strings.Join(warn, "\n"))
	t.Logf("%s: %s (pid %d) stderr tail:\n%s", p.name, p.Holder, p.PID(), Tail(out, 6<<10))
}

// Tail returns the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
