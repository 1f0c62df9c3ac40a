// Command submission-manager is seeds 000/001's SubmissionManager on
// sqlease: of all the instances running it, one leads; the leader builds
// its schedule from SQL (the orders due) and submits each order with a
// write fenced by its lease, so an order is submitted once even when
// leadership moves in the middle.
//
//	go run ./examples/submission-manager -db orders.db -holder a -seed 20 &
//	go run ./examples/submission-manager -db orders.db -holder b
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/sqlite"
)

func main() {
	db := flag.String("db", "orders.db", "SQLite file shared by the instances")
	holder := flag.String("holder", election.DefaultHolderID(), "this instance's id")
	seed := flag.Int("seed", 0, "insert this many orders due now")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *db, *holder, *seed, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run leads or follows until ctx ends.
func run(ctx context.Context, path, holder string, seed int, out io.Writer) error {
	store, err := sqlite.OpenStore(ctx, path, "sqlease")
	if err != nil {
		return err
	}
	defer store.DB().Close()
	db := store.DB()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (
		id INTEGER PRIMARY KEY, due_at TEXT NOT NULL, submitted_by TEXT, submitted_epoch INTEGER)`); err != nil {
		return err
	}
	for range seed {
		if _, err := db.ExecContext(ctx, `INSERT INTO orders (due_at) VALUES (?)`, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
			return err
		}
	}
	var e *election.Elector
	e, err = election.New(election.Config{
		Store: store, LeaseName: "submission-manager", HolderID: holder,
		LeaseDuration: 2 * time.Second, RenewInterval: 500 * time.Millisecond, AcquireInterval: 200 * time.Millisecond,
		OnStartedLeading: func(ctx context.Context, tok sqlease.Token) {
			fmt.Fprintf(out, "%s leads under epoch %d\n", holder, tok.Epoch)
			for ctx.Err() == nil {
				submitDue(ctx, e, db, holder, out)
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		},
	})
	if err != nil {
		return err
	}
	return e.Run(ctx)
}

// submitDue builds the schedule from SQL and submits each due order under
// the fence: the UPDATE commits only while this instance still holds the
// lease, and only for an order nobody submitted.
func submitDue(ctx context.Context, e *election.Elector, db *sql.DB, holder string, out io.Writer) {
	rows, err := db.QueryContext(ctx, `SELECT id FROM orders WHERE submitted_epoch IS NULL AND due_at <= ? ORDER BY id`,
		time.Now().UTC().Format(time.RFC3339Nano))
	if err != nil {
		return
	}
	var due []int64
	for rows.Next() {
		var id int64
		if rows.Scan(&id) == nil {
			due = append(due, id)
		}
	}
	rows.Close()
	for _, id := range due {
		tok, err := e.Require(ctx) // the acting gate: no database round trip
		if err != nil {
			return
		}
		err = e.Fenced(ctx, tok, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE orders SET submitted_by = ?, submitted_epoch = ? WHERE id = ? AND submitted_epoch IS NULL`,
				holder, tok.Epoch, id)
			return err
		})
		if err != nil {
			return // the lease is lost: the next leader submits the rest
		}
		fmt.Fprintf(out, "%s submitted order %d under epoch %d\n", holder, id, tok.Epoch)
	}
}
