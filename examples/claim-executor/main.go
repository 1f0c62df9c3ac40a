// Command claim-executor is seed 004's task executor in claim mode: every
// instance claims due tasks from the shared table and runs them; a claim
// is the claiming worker's while its own lease (worker:<holder>) lives and
// the run heartbeats it, so a long task is not taken over while its worker
// works, and a dead worker's task is re-run by another one within seconds.
// Before its side effect a task checks that it still owns its claim.
//
//	go run ./examples/claim-executor -db tasks.db -holder a -tasks 50 &
//	go run ./examples/claim-executor -db tasks.db -holder b
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlite"
	"github.com/sqlease/sqlease/sqlstore"
)

func main() {
	db := flag.String("db", "tasks.db", "SQLite file shared by the instances")
	holder := flag.String("holder", election.DefaultHolderID(), "this instance's id (letters, digits, . _ - :)")
	tasks := flag.Int("tasks", 0, "submit this many one-off tasks")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *db, *holder, *tasks, 100*time.Millisecond, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run executes tasks until ctx ends; each task takes work.
func run(ctx context.Context, path, holder string, tasks int, work time.Duration, out io.Writer) error {
	store, err := sqlite.OpenStore(ctx, path, "sqlease")
	if err != nil {
		return err
	}
	defer store.DB().Close()
	var mu sync.Mutex
	sched, err := scheduler.New(scheduler.Config{Store: store, Holder: holder, PollInterval: 100 * time.Millisecond,
		Handler: func(ctx context.Context, r sqlease.Run) error {
			select { // the task's work; its claim is heartbeated meanwhile
			case <-time.After(work):
			case <-ctx.Done():
				return ctx.Err()
			}
			// The side effect happens only while the claim is ours.
			if err := scheduler.Ensure(ctx); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			_, err := fmt.Fprintf(out, "%s did %s (attempt %d, lock epoch %d)\n", holder, r.Job, r.Attempt, r.Epoch)
			return err
		}})
	if err != nil {
		return err
	}
	for i := range tasks {
		if _, _, err := sched.Create(ctx, sqlease.Job{Name: fmt.Sprintf("task-%04d", i), Action: []byte(`{}`)}); err != nil {
			return err
		}
	}
	// This worker's own lease: its claims are reclaimable once it expires.
	var worker *election.Elector
	worker, err = election.New(election.Config{Store: store, LeaseName: sqlstore.WorkerLeasePrefix + holder, HolderID: holder,
		LeaseDuration: 2 * time.Second, RenewInterval: 500 * time.Millisecond, AcquireInterval: 200 * time.Millisecond,
		OnStartedLeading: func(ctx context.Context, tok sqlease.Token) { _ = sched.Work(ctx, tok, worker) }})
	if err != nil {
		return err
	}
	return worker.Run(ctx)
}
