package action

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// guardFeedEvery is how often the node tells the guard the deadlines that
// have moved: well within a renew interval.
const guardFeedEvery = 100 * time.Millisecond

// monoNow is CLOCK_MONOTONIC in nanoseconds: one clock for every process
// of the machine, unlike time.Time's monotonic reading.
func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// mono is t (read on this process's monotonic clock) on CLOCK_MONOTONIC;
// the zero time is long past.
func mono(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return monoNow() + int64(time.Until(t))
}

// guard is RunGuard's loop.
func guard(msgs <-chan guardMsg) int {
	watched := map[int]int64{} // pgid → deadline
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		next := int64(-1)
		for _, d := range watched {
			if next < 0 || d < next {
				next = d
			}
		}
		if next >= 0 {
			t.Reset(time.Duration(next - monoNow()))
		} else {
			t.Stop()
		}
		select {
		case m, ok := <-msgs:
			if !ok { // the node is gone
				killAll(watched, -1)
				return 0
			}
			if m.watch {
				watched[m.pgid] = m.deadline
			} else {
				delete(watched, m.pgid)
			}
		case <-t.C:
			killAll(watched, monoNow())
		}
	}
}

// killAll kills, and forgets, the groups whose deadline is at most by
// (all of them when by < 0).
func killAll(watched map[int]int64, by int64) {
	for pgid, d := range watched {
		if by < 0 || d <= by {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			delete(watched, pgid)
		}
	}
}

// guardian is the node's side of its one guard process.
type guardian struct {
	mu   sync.Mutex
	w    *os.File         // to the running guard; nil: none
	pid  int              // the running guard's
	runs map[int]*guarded // pgid → its run
	// exited is closed when the running guard has exited, fed when its
	// feed has returned.
	exited, fed chan struct{}
}

// guarded is a watched command's run: its deadline as last sent.
type guarded struct {
	deadline func() (time.Time, bool)
	last     time.Time
}

var nodeGuard guardian

// guardWatch is a command's watch by the node's guard, prepared before
// the command starts.
type guardWatch struct {
	command  []string // the guard's; nil: no watch
	deadline func() (time.Time, bool)
}

// prepareGuard prepares the watch of a command by the node's guard
// (SetExecGuard), when one is set and deadline tells the instant the
// command's right to act ends (false: nothing bounds it). It starts the
// guard process if none runs, before the command starts: then the watch
// reaches the guard's pipe a moment after the command has started, and a
// node killed in the guard's first milliseconds still has its command's
// group killed.
func prepareGuard(deadline func() (time.Time, bool)) (guardWatch, error) {
	gc := guardCmd.Load()
	if gc == nil || deadline == nil {
		return guardWatch{}, nil
	}
	if _, bounded := deadline(); !bounded {
		return guardWatch{}, nil
	}
	if err := nodeGuard.ensure(*gc); err != nil {
		return guardWatch{}, err
	}
	return guardWatch{*gc, deadline}, nil
}

// start has the guard watch the process group of cmd, which has just
// started, and feeds it the deadline as it moves; stop ends the watch.
func (w guardWatch) start(cmd *exec.Cmd) (stop func(), err error) {
	if w.command == nil {
		return func() {}, nil
	}
	until, _ := w.deadline()
	pgid := cmd.Process.Pid
	if err := nodeGuard.watch(w.command, pgid, &guarded{deadline: w.deadline, last: until}); err != nil {
		return nil, err
	}
	return func() { nodeGuard.unwatch(pgid) }, nil
}

// ensure starts the guard process if none runs.
func (gd *guardian) ensure(command []string) error {
	gd.mu.Lock()
	defer gd.mu.Unlock()
	if gd.w != nil {
		return nil
	}
	return gd.startLocked(command)
}

func (gd *guardian) watch(command []string, pgid int, g *guarded) error {
	gd.mu.Lock()
	defer gd.mu.Unlock()
	if gd.runs == nil {
		gd.runs = map[int]*guarded{}
	}
	gd.runs[pgid] = g
	if gd.w != nil {
		if _, err := fmt.Fprintf(gd.w, "w %d %d\n", pgid, mono(g.last)); err == nil {
			return nil
		}
		gd.w.Close() // the guard died: a new one gets every watch
		gd.w = nil
	}
	if err := gd.startLocked(command); err != nil {
		delete(gd.runs, pgid)
		return err
	}
	return nil
}

func (gd *guardian) unwatch(pgid int) {
	gd.mu.Lock()
	defer gd.mu.Unlock()
	delete(gd.runs, pgid)
	if gd.w != nil {
		_, _ = fmt.Fprintf(gd.w, "u %d\n", pgid)
	}
}

// startLocked starts a guard process and sends it every watch.
func (gd *guardian) startLocked(command []string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	started := make(chan error, 1)
	pid := make(chan int, 1)
	exited := make(chan struct{})
	go func() { // starts the guard and waits for it to exit
		g := exec.Command(command[0], command[1:]...)
		g.ExtraFiles = []*os.File{r}
		g.Env = []string{} // not the node's: it may hold secrets, and the guard needs none
		g.Stderr = os.Stderr
		// No parent-death signal: the node's death closes the pipe, which
		// the guard reads to its end however late it has started.
		err := g.Start()
		r.Close()
		if err == nil {
			pid <- g.Process.Pid
		}
		started <- err
		if err == nil {
			_ = g.Wait()
		}
		close(exited)
	}()
	if err := <-started; err != nil {
		w.Close()
		return err
	}
	fed := make(chan struct{})
	gd.w, gd.pid, gd.exited, gd.fed = w, <-pid, exited, fed
	go func() { defer close(fed); gd.feed(w, exited, time.Now()) }()
	for pgid, g := range gd.runs {
		if _, err := fmt.Fprintf(w, "w %d %d\n", pgid, mono(g.last)); err != nil {
			return err
		}
	}
	return nil
}

// shutdown ends the guard process, killing what it still watches, and
// forgets every watch (tests).
func (gd *guardian) shutdown() {
	gd.mu.Lock()
	w, exited, fed := gd.w, gd.exited, gd.fed
	gd.w, gd.pid, gd.runs = nil, 0, nil
	gd.mu.Unlock()
	if w != nil {
		w.Close()
		<-exited
		<-fed
	}
}

// feed sends the guard started with w at started the deadlines that
// moved, until it exits; then, if runs are still watched, it starts
// another (not more than once a second: a guard that cannot run must not
// make the node spin).
func (gd *guardian) feed(w *os.File, exited <-chan struct{}, started time.Time) {
	tick := time.NewTicker(guardFeedEvery)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			gd.mu.Lock()
			mine := gd.w == w
			if mine {
				w.Close()
				gd.w, gd.pid = nil, 0
			}
			again := mine && len(gd.runs) > 0
			gd.mu.Unlock()
			if !again {
				return
			}
			time.Sleep(time.Second - time.Since(started))
			gd.mu.Lock()
			defer gd.mu.Unlock()
			if gc := guardCmd.Load(); gc != nil && gd.w == nil && len(gd.runs) > 0 {
				_ = gd.startLocked(*gc)
			}
			return
		case <-tick.C:
		}
		gd.mu.Lock()
		if gd.w != w {
			gd.mu.Unlock()
			return
		}
		for pgid, g := range gd.runs {
			if u, ok := g.deadline(); ok && !u.Equal(g.last) {
				g.last = u
				_, _ = fmt.Fprintf(w, "w %d %d\n", pgid, mono(u))
			}
		}
		gd.mu.Unlock()
	}
}
