// Command sqlease runs a sqlease node and administers its database; see
// sqlease --help.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/sqlease/sqlease/action"
	"github.com/sqlease/sqlease/internal/cli"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == action.GuardArg {
		os.Exit(action.RunGuard(os.Args[2:])) // an exec action's guard (action.SetExecGuard)
	}
	// Exec commands run under a guard, this binary again (one per node),
	// that stops them should the node be frozen past their run's deadline,
	// or die (Linux).
	action.SetExecGuard([]string{"/proc/self/exe", action.GuardArg})
	if _, set := os.LookupEnv("GOGC"); !set {
		// A node's live heap is small (tens of MiB: the scheduler keeps a
		// window, not its jobs), and at thousands of deliveries a second
		// Go's default collector is a large share of its CPU. Collecting
		// at five times the live heap rather than twice took 8-15 % off
		// the CPU per delivery for some 40 MiB more at the peak of a
		// 20,000-job burst (sqlease-bench -bench daemon; GOGC=200 gained
		// nothing measurable). GOGC and GOMEMLIMIT in the environment
		// still choose.
		debug.SetGCPercent(400)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := cli.Main(ctx, os.Args[1:], cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
