// Command sqlease runs a sqlease node and administers its database; see
// sqlease --help.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sqlease/sqlease/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := cli.Main(ctx, os.Args[1:], cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
