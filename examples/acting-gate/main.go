// Command acting-gate is seed 002's acting gate in front of an external
// sender, on PostgreSQL in advisory mode: the instances elect a leader
// through a session lock (failover in milliseconds when the leader's
// session ends), and the leader checks the gate — a local deadline, no
// database round trip — immediately before every send, passing its epoch
// along so the receiver can refuse a deposed sender.
//
//	go run ./examples/acting-gate -db postgres://… -to http://127.0.0.1:9000/send &
//	go run ./examples/acting-gate -db postgres://… -to http://127.0.0.1:9000/send
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/postgres"
)

func main() {
	db := flag.String("db", "", "PostgreSQL URL")
	to := flag.String("to", "", "URL to send to (the external system)")
	holder := flag.String("holder", election.DefaultHolderID(), "this instance's id")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *db, *to, *holder, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, dsn, to, holder string, out io.Writer) error {
	store, err := postgres.OpenStore(ctx, dsn, "sqlease")
	if err != nil {
		return err
	}
	defer store.DB().Close()
	locker, err := postgres.NewLocker(postgres.AdvisoryConfig{DSN: dsn, Prefix: "sqlease"})
	if err != nil {
		return err
	}
	var e *election.Elector
	e, err = election.New(election.Config{
		Store: store, SessionLocker: locker, LeaseName: "sender", HolderID: holder,
		OnStartedLeading: func(ctx context.Context, tok sqlease.Token) {
			fmt.Fprintf(out, "%s leads under epoch %d\n", holder, tok.Epoch)
			for seq := 1; ctx.Err() == nil; seq++ {
				// The gate, just before the send: a leader that can no
				// longer trust its lease does not send.
				tok, err := e.Require(ctx)
				if err != nil {
					return
				}
				req, err := http.NewRequestWithContext(ctx, "POST", to, strings.NewReader(fmt.Sprintf(`{"seq":%d}`, seq)))
				if err != nil {
					return
				}
				req.Header.Set("Sqlease-Epoch", fmt.Sprint(tok.Epoch))
				req.Header.Set("Sqlease-Holder", holder)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		},
	})
	if err != nil {
		return err
	}
	return e.Run(ctx)
}
