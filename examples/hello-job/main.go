// Command hello-job is the smallest complete program on the sqlease
// library: it opens a SQLite database, creates a job that runs every
// second, and runs it under leader election until it has run three times.
//
//	go run ./examples/hello-job
//
// Start it twice at once on the same file (-db) and only one process runs
// the job: the other waits as a follower, and takes over when the first
// stops.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlite"
)

func main() {
	db := flag.String("db", "hello.db", "SQLite file (created and migrated if missing)")
	runs := flag.Int("runs", 3, "stop after this many runs")
	flag.Parse()
	if err := run(context.Background(), *db, *runs, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run runs the job "hello" every second until it has run n times in this
// process, then stops: the lease is released for another process.
func run(ctx context.Context, path string, n int, out io.Writer) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()

	// 1. A store: the lease, jobs and runs tables, migrated at open.
	//    postgres.OpenStore, mysql.OpenStore and sqlserver.OpenStore take
	//    a URL instead.
	store, err := sqlite.OpenStore(ctx, path, "sqlease")
	if err != nil {
		return err
	}
	defer store.DB().Close()

	// 2. A scheduler with the handler that runs every job's attempts. The
	//    run's context ends if this process loses the lease mid-run.
	done := make(chan struct{}, n)
	sched, err := scheduler.New(scheduler.Config{
		Store: store,
		Handler: func(ctx context.Context, r sqlease.Run) error {
			fmt.Fprintf(out, "run %s attempt %d under epoch %d\n", r.IdempotencyKey(), r.Attempt, r.Epoch)
			select {
			case done <- struct{}{}:
			default:
			}
			return nil
		},
	})
	if err != nil {
		return err
	}

	// 3. A job, stored in the database: creating it again with the same
	//    content is a no-op (created is false), so every process may do it.
	if _, created, err := sched.Create(ctx, sqlease.Job{
		Name:     "hello",
		Schedule: sqlease.Schedule{Every: time.Second},
	}); err != nil {
		return err
	} else if created {
		fmt.Fprintln(out, "created job hello")
	}

	// 4. An elector. While this process leads, OnStartedLeading runs the
	//    scheduler's Lead, which blocks: it dispatches due runs for as long
	//    as the term lasts and returns when ctx is cancelled (leadership
	//    lost, or the elector stopping).
	var el *election.Elector
	el, err = election.New(election.Config{
		Store: store,
		OnStartedLeading: func(ctx context.Context, tok sqlease.Token) {
			fmt.Fprintf(out, "leading under epoch %d\n", tok.Epoch)
			err := sched.Lead(ctx, el, tok) // blocks for the whole term
			fmt.Fprintf(out, "Lead returned: %v\n", err)
		},
	})
	if err != nil {
		return err
	}
	go func() {
		for range n {
			select {
			case <-done:
			case <-ctx.Done():
				return
			}
		}
		stop() // enough runs: end the term and release the lease
	}()
	// Run blocks until ctx ends, then waits for OnStartedLeading to return
	// and releases the lease.
	return el.Run(ctx)
}
