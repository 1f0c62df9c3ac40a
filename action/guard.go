package action

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
)

// GuardArg is the first argument that makes the daemon's binary an exec
// guard (RunGuard) rather than the daemon.
const GuardArg = "__sqlease-exec-guard"

// guardCmd is the command that runs RunGuard; nil: no guard.
var guardCmd atomic.Pointer[[]string]

// SetExecGuard makes every exec action whose run has an acting deadline
// (scheduler.ActDeadline) run beside a guard process: command followed by
// the arguments RunGuard takes. The daemon passes itself and GuardArg.
//
// Why: a frozen node (SIGSTOP, a debugger) cannot stop its commands, which
// are processes of their own and keep running. Its lease expires, another
// node retries the occurrence, and two executions would overlap. The guard
// is not frozen with the node: it kills the command's process group at the
// run's acting deadline, which comes before the lease can expire in
// database time, unless the node has moved the deadline on since.
func SetExecGuard(command []string) {
	if len(command) == 0 {
		guardCmd.Store(nil)
		return
	}
	c := append([]string(nil), command...)
	guardCmd.Store(&c)
}

// RunGuard is the exec guard's process: args are the process group to
// guard and its first deadline, as CLOCK_MONOTONIC nanoseconds; later
// deadlines arrive as lines on file descriptor 3, and "done" when the node
// has seen the command end. It kills the whole group with SIGKILL once the
// last deadline it read has passed, and when the node dies (its
// parent-death signal, SIGTERM, or the descriptor closed without "done"):
// what the command started in its group goes too. It returns the
// process's exit status.
func RunGuard(args []string) int {
	if len(args) != 2 {
		fmt.Fprintf(os.Stderr, "%s: want PGID DEADLINE, got %q\n", GuardArg, args)
		return 2
	}
	pgid, err1 := strconv.Atoi(args[0])
	first, err2 := strconv.ParseInt(args[1], 10, 64)
	if err1 != nil || err2 != nil || pgid <= 1 {
		fmt.Fprintf(os.Stderr, "%s: want PGID DEADLINE, got %q\n", GuardArg, args)
		return 2
	}
	deadlines := make(chan int64)
	done := make(chan struct{})
	go func() {
		defer close(deadlines)
		sc := bufio.NewScanner(os.NewFile(3, "deadlines"))
		for sc.Scan() {
			if sc.Text() == "done" {
				close(done)
				return
			}
			if d, err := strconv.ParseInt(sc.Text(), 10, 64); err == nil {
				deadlines <- d
			}
		}
	}()
	return guard(pgid, first, deadlines, done)
}
