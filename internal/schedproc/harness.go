package schedproc

// The fleet harness is adapted from internal/multiproc's (which is tied to
// that package's worker configuration and event type): the same process
// handling, event log, waits with deadlines and signals.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Fleet is a set of worker processes and the log of their events. Its
// methods must be called from the test goroutine (they may call t.Fatal).
type Fleet struct {
	t    testing.TB
	base WorkerConfig
	dir  string

	mu     sync.Mutex
	events []Event
	notify chan struct{} // closed and replaced on every new event
	procs  []*Proc
}

// Proc is one worker process.
type Proc struct {
	f      *Fleet
	Idx    int
	Holder string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	errLog string

	done    chan struct{} // closed once the process has exited and its output is read
	exitErr error

	mu     sync.Mutex
	killed bool
	termed bool
}

// NewFleet returns an empty fleet whose workers get base (Holder is set per
// worker). Its cleanup kills any worker still running and, if the test
// failed, logs the events and the workers' stderr.
func NewFleet(t testing.TB, base WorkerConfig) *Fleet {
	f := &Fleet{t: t, base: base, dir: t.TempDir(), notify: make(chan struct{})}
	t.Cleanup(func() {
		for _, p := range f.Procs() {
			if !p.Exited() {
				p.signal(syscall.SIGKILL)
				select {
				case <-p.done:
				case <-time.After(10 * time.Second):
					t.Errorf("worker %s (pid %d) did not die after SIGKILL", p.Holder, p.PID())
				}
			}
		}
		if t.Failed() {
			f.dump()
		}
	})
	return f
}

// Start launches n workers, waits until each reports ready, then tells them
// all to go at once.
func (f *Fleet) Start(n int, edit func(*WorkerConfig)) []*Proc {
	f.t.Helper()
	from := f.Mark()
	procs := make([]*Proc, n)
	for i := range procs {
		procs[i] = f.Launch(edit)
	}
	for _, p := range procs {
		f.Wait(from, 30*time.Second, p.Holder+" ready", func(e Event) bool {
			return e.Proc == p.Idx && e.Ev == EvReady
		})
	}
	for _, p := range procs {
		p.Send(CmdGo)
	}
	return procs
}

// Launch starts one worker (holder w<index>) without telling it to go.
func (f *Fleet) Launch(edit func(*WorkerConfig)) *Proc {
	f.t.Helper()
	f.mu.Lock()
	idx := len(f.procs)
	f.mu.Unlock()
	cfg := f.base
	cfg.Holder = fmt.Sprintf("w%d", idx)
	if edit != nil {
		edit(&cfg)
	}
	env, err := cfg.Env()
	if err != nil {
		f.t.Fatalf("schedproc: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		f.t.Fatalf("schedproc: %v", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env...)
	errLog, err := os.Create(filepath.Join(f.dir, cfg.Holder+".stderr"))
	if err != nil {
		f.t.Fatalf("schedproc: %v", err)
	}
	defer errLog.Close()
	cmd.Stderr = errLog
	stdin, err := cmd.StdinPipe()
	if err != nil {
		f.t.Fatalf("schedproc: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		f.t.Fatalf("schedproc: %v", err)
	}
	p := &Proc{f: f, Idx: idx, Holder: cfg.Holder, cmd: cmd, stdin: stdin, errLog: errLog.Name(), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		f.t.Fatalf("schedproc: starting worker: %v", err)
	}
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	go p.read(stdout)
	return p
}

func (p *Proc) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			ev = Event{Ev: EvFatal, Holder: p.Holder, T: time.Now(), Err: fmt.Sprintf("unparsable stdout line %q: %v", sc.Text(), err)}
		}
		ev.Proc = p.Idx
		p.f.add(ev)
	}
	p.exitErr = p.cmd.Wait()
	close(p.done)
	p.f.add(Event{Ev: "process_exit", Holder: p.Holder, Proc: p.Idx, T: time.Now(), Err: fmt.Sprint(p.exitErr)})
}

func (f *Fleet) add(ev Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ev.Recv = time.Now()
	ev.Index = len(f.events)
	f.events = append(f.events, ev)
	close(f.notify)
	f.notify = make(chan struct{})
}

// Procs returns the workers launched so far.
func (f *Fleet) Procs() []*Proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Proc(nil), f.procs...)
}

// Proc returns the worker whose holder id is holder, or nil.
func (f *Fleet) Proc(holder string) *Proc {
	for _, p := range f.Procs() {
		if p.Holder == holder {
			return p
		}
	}
	return nil
}

// Mark returns the position of the next event.
func (f *Fleet) Mark() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.events)
}

// Events returns a copy of the event log.
func (f *Fleet) Events() []Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Event(nil), f.events...)
}

// Select returns the events from position from on that match pred.
func (f *Fleet) Select(from int, pred func(Event) bool) []Event {
	var out []Event
	for _, e := range f.Events()[from:] {
		if pred(e) {
			out = append(out, e)
		}
	}
	return out
}

// TryWait waits up to timeout for an event at position from or later that
// matches pred.
func (f *Fleet) TryWait(from int, timeout time.Duration, pred func(Event) bool) (Event, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		for ; from < len(f.events); from++ {
			if pred(f.events[from]) {
				e := f.events[from]
				f.mu.Unlock()
				return e, true
			}
		}
		ch := f.notify
		f.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			return Event{}, false
		}
	}
}

// Wait is TryWait that fails the test, naming what, on timeout.
func (f *Fleet) Wait(from int, timeout time.Duration, what string, pred func(Event) bool) Event {
	f.t.Helper()
	e, ok := f.TryWait(from, timeout, pred)
	if !ok {
		f.t.Fatalf("schedproc: timed out after %v waiting for %s", timeout, what)
	}
	return e
}

// WaitCount waits until n events from position from on match pred and
// returns the n-th.
func (f *Fleet) WaitCount(from int, n int, timeout time.Duration, what string, pred func(Event) bool) Event {
	f.t.Helper()
	count := 0
	return f.Wait(from, timeout, what, func(e Event) bool {
		if pred(e) {
			count++
		}
		return count >= n
	})
}

// Send writes a command line to the worker's stdin.
func (p *Proc) Send(cmd string) {
	p.f.t.Helper()
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		p.f.t.Fatalf("schedproc: sending %q to %s: %v", cmd, p.Holder, err)
	}
}

// PID returns the worker's process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the worker has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *Proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	switch sig {
	case syscall.SIGKILL:
		p.killed = true
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

// Term sends SIGTERM (graceful shutdown).
func (p *Proc) Term() { p.signal(syscall.SIGTERM) }

// Cont sends SIGCONT.
func (p *Proc) Cont() { p.signal(syscall.SIGCONT) }

// Killed reports whether the test SIGKILLed the worker.
func (p *Proc) Killed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

// State returns the process state letter from /proc/<pid>/stat ("T" for
// stopped, …) or "" if it cannot be read.
func (p *Proc) State() string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID()))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// WaitStopped waits until the worker is in the stopped state.
func (p *Proc) WaitStopped(timeout time.Duration) {
	p.f.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if st := p.State(); st == "T" || st == "t" {
			return
		}
		if time.Now().After(deadline) {
			p.f.t.Fatalf("schedproc: %s (pid %d) not stopped after %v (state %q)", p.Holder, p.PID(), timeout, p.State())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// WaitExit waits for the worker to exit and reports whether it did in time.
func (p *Proc) WaitExit(timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Shutdown sends SIGTERM to the given workers (all if none given) and waits
// for them to exit. A worker that does not exit within timeout is killed and
// the test fails.
func (f *Fleet) Shutdown(timeout time.Duration, procs ...*Proc) {
	f.t.Helper()
	if len(procs) == 0 {
		procs = f.Procs()
	}
	for _, p := range procs {
		if !p.Exited() {
			p.Term()
		}
	}
	for _, p := range procs {
		if !p.WaitExit(timeout) {
			f.t.Errorf("schedproc: %s (pid %d) did not exit within %v of SIGTERM; killing it", p.Holder, p.PID(), timeout)
			p.Kill()
			p.WaitExit(10 * time.Second)
		}
	}
}

// CheckWorkers fails the test if a worker printed a fatal event or a data
// race report, or exited with a non-zero status after a SIGTERM.
func (f *Fleet) CheckWorkers() {
	f.t.Helper()
	for _, e := range f.Events() {
		if e.Ev == EvFatal {
			f.t.Errorf("worker %s: fatal: %s", e.Holder, e.Err)
		}
	}
	for _, p := range f.Procs() {
		b, _ := os.ReadFile(p.errLog)
		if bytes.Contains(b, []byte("DATA RACE")) || bytes.Contains(b, []byte("panic:")) {
			f.t.Errorf("worker %s: stderr reports a data race or panic:\n%s", p.Holder, tail(b, 8<<10))
		}
		p.mu.Lock()
		killed, termed := p.killed, p.termed
		p.mu.Unlock()
		if p.Exited() && termed && !killed && p.exitErr != nil {
			f.t.Errorf("worker %s: exit after SIGTERM: %v (want status 0)", p.Holder, p.exitErr)
		}
	}
}

// Stderr returns what the worker wrote to stderr so far (its logs).
func (p *Proc) Stderr() string {
	b, _ := os.ReadFile(p.errLog)
	return string(b)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// dump logs the event log (at most the last 3000 events) and each worker's
// stderr tail.
func (f *Fleet) dump() {
	t := f.t
	events := f.Events()
	var b strings.Builder
	if len(events) > 3000 {
		fmt.Fprintf(&b, "  … %d earlier events\n", len(events)-3000)
		events = events[len(events)-3000:]
	}
	for _, e := range events {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	t.Logf("schedproc: event log:\n%s", b.String())
	for _, p := range f.Procs() {
		out := p.Stderr()
		var warn []string
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
				warn = append(warn, line)
			}
		}
		if len(warn) > 200 {
			warn = append(warn[:100], append([]string{"…"}, warn[len(warn)-100:]...)...)
		}
		t.Logf("schedproc: %s (pid %d) warnings and errors:\n%s", p.Holder, p.PID(), strings.Join(warn, "\n"))
		t.Logf("schedproc: %s (pid %d) stderr tail:\n%s", p.Holder, p.PID(), tail([]byte(out), 6<<10))
	}
}
