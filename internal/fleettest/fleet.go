package fleettest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// The worker protocol: a worker prints one JSON object per line on stdout,
// each with at least these fields; it reads commands on stdin, one per line.
const (
	EvReady = "ready" // the worker is set up and waits for CmdGo
	EvFatal = "fatal" // the worker cannot go on (err)
	// EvProcessExit is added by the fleet (not printed) when a worker's
	// process has exited; err is what Wait returned.
	EvProcessExit = "process_exit"
	CmdGo         = "go" // start working
)

// header is the part of a worker's line every worker prints.
type header struct {
	Ev     string    `json:"ev"`
	Holder string    `json:"holder"`
	T      time.Time `json:"t"`
	Err    string    `json:"err,omitempty"`
}

// Meta is what the fleet records about each line it reads. A worker's event
// type embeds it, which makes the type an Event.
type Meta struct {
	Proc  int       `json:"-"` // index of the worker in the fleet
	Recv  time.Time `json:"-"` // test's clock when the line was read
	Index int       `json:"-"` // position in the fleet's event log

	ev, holder, err string
}

func (m *Meta) meta() *Meta { return m }

// Event is the constraint on a fleet's event type E: a struct that embeds
// Meta and decodes from a worker's JSON line (fields ev, holder, t, err).
type Event[E any] interface {
	*E
	fmt.Stringer
	meta() *Meta
}

// Fleet is a set of worker processes — the test binary re-executed with an
// environment that makes its TestMain run the worker — and the log of their
// events. Its methods must be called from the test goroutine (they may call
// t.Fatal).
type Fleet[E any, P Event[E]] struct {
	t    testing.TB
	name string
	dir  string
	// Format, if set, renders the event log when a test fails (default:
	// the last 3000 events, one per line).
	Format func([]E) string

	events Log[E]

	mu    sync.Mutex
	procs []*Proc
}

// New returns an empty fleet; name prefixes its failure messages. Its
// cleanup kills any worker still running and, if the test failed, logs the
// events and the workers' stderr.
func New[E any, P Event[E]](t testing.TB, name string) *Fleet[E, P] {
	f := &Fleet[E, P]{t: t, name: name, dir: t.TempDir()}
	t.Cleanup(func() {
		killOnCleanup(t, f.Procs())
		if t.Failed() {
			f.dump()
		}
	})
	return f
}

// T returns the fleet's test.
func (f *Fleet[E, P]) T() testing.TB { return f.t }

// Launch starts the test binary as worker holder, with env added to the
// test's environment, without telling it to go.
func (f *Fleet[E, P]) Launch(holder string, env []string) *Proc {
	f.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		f.t.Fatalf("%s: %v", f.name, err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env...)
	f.mu.Lock()
	idx := len(f.procs)
	f.mu.Unlock()
	var p *Proc
	p, err = startProc(f.t, f.name, f.dir, idx, holder, cmd, false,
		func(line []byte) { f.addLine(idx, holder, line) },
		func(err error) {
			f.addSynthetic(idx, header{Ev: EvProcessExit, Holder: holder, T: time.Now(), Err: fmt.Sprint(err)})
		})
	if err != nil {
		f.t.Fatalf("%s: %v", f.name, err)
	}
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	return p
}

// Go waits until each of procs has reported ready (an event at position
// from or later), then tells them all to go at once.
func (f *Fleet[E, P]) Go(from int, procs ...*Proc) {
	f.t.Helper()
	for _, p := range procs {
		f.Wait(from, 30*time.Second, p.Holder+" ready", func(e E) bool {
			m := P(&e).meta()
			return m.Proc == p.Idx && m.ev == EvReady
		})
	}
	for _, p := range procs {
		p.Send(CmdGo)
	}
}

func (f *Fleet[E, P]) addLine(proc int, holder string, line []byte) {
	var e E
	var h header
	err := json.Unmarshal(line, &h)
	if err == nil {
		err = json.Unmarshal(line, P(&e))
	}
	if err != nil {
		f.addSynthetic(proc, header{Ev: EvFatal, Holder: holder, T: time.Now(), Err: fmt.Sprintf("unparsable stdout line %q: %v", line, err)})
		return
	}
	f.add(proc, h, e)
}

// addSynthetic adds an event the fleet made up, decoded from h as if the
// worker had printed it.
func (f *Fleet[E, P]) addSynthetic(proc int, h header) {
	var e E
	b, _ := json.Marshal(h)
	_ = json.Unmarshal(b, P(&e))
	f.add(proc, h, e)
}

func (f *Fleet[E, P]) add(proc int, h header, e E) {
	f.events.Add(func(index int) E {
		m := P(&e).meta()
		m.Proc, m.Recv, m.Index = proc, time.Now(), index
		m.ev, m.holder, m.err = h.Ev, h.Holder, h.Err
		return e
	})
}

// Procs returns the workers launched so far.
func (f *Fleet[E, P]) Procs() []*Proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Proc(nil), f.procs...)
}

// Proc returns the worker whose holder id is holder, or nil.
func (f *Fleet[E, P]) Proc(holder string) *Proc {
	for _, p := range f.Procs() {
		if p.Holder == holder {
			return p
		}
	}
	return nil
}

// Mark returns the position of the next event, to wait for events from now on.
func (f *Fleet[E, P]) Mark() int { return f.events.Len() }

// Events returns a copy of the event log.
func (f *Fleet[E, P]) Events() []E { return f.events.All() }

// Select returns the events from position from on that match pred.
func (f *Fleet[E, P]) Select(from int, pred func(E) bool) []E {
	var out []E
	for _, e := range f.Events()[from:] {
		if pred(e) {
			out = append(out, e)
		}
	}
	return out
}

// TryWait waits up to timeout for an event at position from or later that
// matches pred.
func (f *Fleet[E, P]) TryWait(from int, timeout time.Duration, pred func(E) bool) (E, bool) {
	return f.events.TryWait(from, timeout, pred)
}

// Wait is TryWait that fails the test, naming what, on timeout.
func (f *Fleet[E, P]) Wait(from int, timeout time.Duration, what string, pred func(E) bool) E {
	f.t.Helper()
	e, ok := f.TryWait(from, timeout, pred)
	if !ok {
		f.t.Fatalf("%s: timed out after %v waiting for %s", f.name, timeout, what)
	}
	return e
}

// WaitCount waits until n events from position from on match pred and
// returns the n-th.
func (f *Fleet[E, P]) WaitCount(from int, n int, timeout time.Duration, what string, pred func(E) bool) E {
	f.t.Helper()
	count := 0
	return f.Wait(from, timeout, what, func(e E) bool {
		if pred(e) {
			count++
		}
		return count >= n
	})
}

// Shutdown sends SIGTERM to the given workers (all if none given) and waits
// for them to exit. A worker that does not exit within timeout is killed and
// the test fails.
func (f *Fleet[E, P]) Shutdown(timeout time.Duration, procs ...*Proc) {
	f.t.Helper()
	if len(procs) == 0 {
		procs = f.Procs()
	}
	shutdown(f.t, f.name, timeout, procs)
}

// CheckWorkers fails the test if a worker printed a fatal event or a data
// race report or panic, or exited with a non-zero status after a SIGTERM.
func (f *Fleet[E, P]) CheckWorkers() {
	f.t.Helper()
	for _, e := range f.Events() {
		if m := P(&e).meta(); m.ev == EvFatal {
			f.t.Errorf("worker %s: fatal: %s", m.holder, m.err)
		}
	}
	for _, p := range f.Procs() {
		p.check(f.t)
	}
}

// dump logs the event log and each worker's warnings and stderr tail.
func (f *Fleet[E, P]) dump() {
	events := f.Events()
	format := f.Format
	if format == nil {
		format = lastEvents[E, P]
	}
	f.t.Logf("%s: event log:\n%s", f.name, format(events))
	for _, p := range f.Procs() {
		p.logStderr(f.t)
	}
}

func lastEvents[E any, P Event[E]](events []E) string {
	var b strings.Builder
	if len(events) > 3000 {
		fmt.Fprintf(&b, "  … %d earlier events\n", len(events)-3000)
		events = events[len(events)-3000:]
	}
	for _, e := range events {
		fmt.Fprintf(&b, "  %s\n", P(&e))
	}
	return b.String()
}
