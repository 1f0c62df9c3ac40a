package action

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// GuardArg is the first argument that makes the daemon's binary an exec
// guard (RunGuard) rather than the daemon.
const GuardArg = "__sqlease-exec-guard"

// guardCmd is the command that runs RunGuard; nil: no guard.
var guardCmd atomic.Pointer[[]string]

// SetExecGuard makes every exec action whose run has an acting deadline
// (scheduler.ActDeadline) run under the node's guard process: command
// followed by its arguments runs RunGuard. The daemon passes itself and
// GuardArg.
//
// Why: a frozen node (SIGSTOP, a debugger) cannot stop its commands, which
// are processes of their own and keep running. Its lease expires, another
// node retries the occurrence, and two executions would overlap. The guard
// is not frozen with the node: it kills a command's process group at its
// run's acting deadline, which comes before the lease can expire in
// database time, unless the node has moved the deadline on since. And it
// kills them all when the node dies, also what the commands started.
func SetExecGuard(command []string) {
	if len(command) == 0 {
		guardCmd.Store(nil)
		return
	}
	c := append([]string(nil), command...)
	guardCmd.Store(&c)
}

// RunGuard is the guard's process (it takes no arguments). It reads from
// file descriptor 3 lines "w PGID DEADLINE" (watch the process group PGID,
// or move its deadline, as CLOCK_MONOTONIC nanoseconds) and "u PGID" (the
// command has ended). It kills a group with SIGKILL once its deadline has
// passed, and every group it watches when the node dies, which closes the
// descriptor. It returns the process's exit status.
func RunGuard(args []string) int {
	if len(args) != 0 {
		fmt.Fprintf(os.Stderr, "%s: takes no arguments, got %q\n", GuardArg, args)
		return 2
	}
	// The guard ends when the node does, and only then: the closed pipe
	// tells it. It ignores the signals a service manager or a terminal
	// sends the node's whole cgroup or process group on a stop, which must
	// leave the node's graceful stop (SIGTERM, stop_timeout) to the node.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	msgs := make(chan guardMsg)
	go func() {
		defer close(msgs)
		sc := bufio.NewScanner(os.NewFile(3, "watches"))
		for sc.Scan() {
			var m guardMsg
			var err error
			switch f := strings.Fields(sc.Text()); {
			case len(f) == 3 && f[0] == "w":
				m.watch = true
				m.pgid, err = strconv.Atoi(f[1])
				if err == nil {
					m.deadline, err = strconv.ParseInt(f[2], 10, 64)
				}
			case len(f) == 2 && f[0] == "u":
				m.pgid, err = strconv.Atoi(f[1])
			default:
				err = fmt.Errorf("bad line %q", sc.Text())
			}
			if err != nil || m.pgid <= 1 {
				fmt.Fprintf(os.Stderr, "%s: %v\n", GuardArg, err)
				continue
			}
			msgs <- m
		}
	}()
	return guard(msgs)
}

// guardMsg is a line the guard read: watch pgid until deadline, or not.
type guardMsg struct {
	watch    bool
	pgid     int
	deadline int64
}
