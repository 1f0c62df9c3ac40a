// Command sqlease runs a sqlease node and administers its database; see
// sqlease --help.
package main

import (
	"context"
	"os"
	"os/signal"
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := cli.Main(ctx, os.Args[1:], cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
