// Command singleton-cron is seed 003's cluster singleton beside cron jobs:
// every instance runs a scheduler for its jobs and competes for the
// singleton "ingest", a long-running loop whose progress (a cursor) is
// saved in the database on every step, so the next instance resumes from
// it after a failover; the saves are fenced by the singleton's lease.
//
//	go run ./examples/singleton-cron -db app.db -holder a &
//	go run ./examples/singleton-cron -db app.db -holder b
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
	"github.com/sqlease/sqlease/singleton"
	"github.com/sqlease/sqlease/sqlite"
)

// cursor is the singleton's state: where the ingest stands.
type cursor struct {
	Offset int `json:"offset"`
}

func main() {
	db := flag.String("db", "app.db", "SQLite file shared by the instances")
	holder := flag.String("holder", election.DefaultHolderID(), "this instance's id")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *db, *holder, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, path, holder string, out io.Writer) error {
	store, err := sqlite.OpenStore(ctx, path, "sqlease")
	if err != nil {
		return err
	}
	defer store.DB().Close()
	var mu sync.Mutex
	say := func(format string, args ...any) { mu.Lock(); defer mu.Unlock(); fmt.Fprintf(out, format+"\n", args...) }

	// The cron job: claimed by one instance per occurrence.
	sched, err := scheduler.New(scheduler.Config{Store: store, Holder: holder,
		Handler: func(ctx context.Context, r sqlease.Run) error {
			say("%s runs %s for %s", holder, r.Job, r.ScheduledFor.Format(time.TimeOnly))
			return nil
		}})
	if err != nil {
		return err
	}
	if _, _, err := sched.Create(ctx, sqlease.Job{Name: "report", Schedule: sqlease.Schedule{Cron: "* * * * *"},
		Action: []byte(`{}`)}); err != nil {
		return err
	}

	// The singleton: one instance at a time, resuming from the saved cursor.
	node, err := singleton.NewNode(singleton.NodeConfig{Store: store, HolderID: holder,
		LeaseDuration: 2 * time.Second, RenewInterval: 500 * time.Millisecond, AcquireInterval: 200 * time.Millisecond})
	if err != nil {
		return err
	}
	err = singleton.Register(node, singleton.Config[cursor]{
		Name: "ingest", HeartbeatInterval: time.Second,
		Body: func(ctx context.Context, in *singleton.Instance[cursor]) error {
			c := in.State()
			say("%s resumes ingest at offset %d (epoch %d)", holder, c.Offset, in.Token().Epoch)
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(50 * time.Millisecond):
				}
				c.Offset++ // one record consumed
				if err := in.Save(ctx, c); err != nil {
					return err // the lease is lost: another instance goes on
				}
			}
		},
	})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = sched.Run(ctx) }()
	go func() { defer wg.Done(); _ = node.Run(ctx) }()
	wg.Wait()
	return nil
}
