package action

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sqlease/sqlease/scheduler"
)

// guardFeedEvery is how often the node tells a guard the run's deadline,
// when it has moved: well within a renew interval.
const guardFeedEvery = 100 * time.Millisecond

// monoNow is CLOCK_MONOTONIC in nanoseconds: one clock for every process
// of the machine, unlike time.Time's monotonic reading.
func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// mono is t (read on this process's monotonic clock) on CLOCK_MONOTONIC.
func mono(t time.Time) int64 { return monoNow() + int64(time.Until(t)) }

func guard(pgid int, deadline int64, deadlines <-chan int64, done <-chan struct{}) int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM) // the node died
	t := time.NewTimer(time.Duration(deadline - monoNow()))
	defer t.Stop()
	for {
		select {
		case <-done:
			return 0
		case d, ok := <-deadlines:
			if ok {
				t.Reset(time.Duration(d - monoNow()))
				continue
			}
			select {
			case <-done: // "done" was the last line
				return 0
			default: // the node is gone without saying so
			}
		case <-term:
		case <-t.C:
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return 0
	}
}

// startGuard starts the guard of cmd's process group (SetExecGuard), when
// one is set and ctx's run has an acting deadline, and feeds it the
// deadline as it moves; stop ends the guard. Call it on the thread that
// started cmd, locked until stop has returned: the guard, too, dies with
// the node.
func startGuard(ctx context.Context, cmd *exec.Cmd) (stop func(), err error) {
	gc := guardCmd.Load()
	until, bounded := scheduler.ActDeadline(ctx)
	if gc == nil || !bounded {
		return func() {}, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	args := append((*gc)[1:len(*gc):len(*gc)], strconv.Itoa(cmd.Process.Pid), strconv.FormatInt(mono(until), 10))
	g := exec.Command((*gc)[0], args...)
	g.ExtraFiles = []*os.File{r}
	g.Env = []string{} // not the node's: it may hold secrets, and the guard needs none
	g.Stderr = os.Stderr
	g.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM} // it then kills the group
	err = g.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, err
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(guardFeedEvery)
		defer tick.Stop()
		last := until
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if u, ok := scheduler.ActDeadline(ctx); ok && !u.Equal(last) {
				last = u
				if _, err := fmt.Fprintf(w, "%d\n", mono(u)); err != nil {
					return // the guard is gone: it killed the command
				}
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		_, _ = fmt.Fprintln(w, "done")
		w.Close()
		_ = g.Wait()
	}, nil
}
