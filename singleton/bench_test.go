package singleton_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"

	"github.com/sqlease/sqlease/singleton"
	"github.com/sqlease/sqlease/sqlstore"
)

// BenchmarkSave measures Instance.Save — one transaction fenced by the
// singleton's lease — on SQLite and, with SQLEASE_TEST_POSTGRES_URL, on
// PostgreSQL: go test -run '^$' -bench Save -count 5 ./singleton
func BenchmarkSave(b *testing.B) {
	for _, d := range []string{"sqlite", "postgres"} {
		b.Run(d, func(b *testing.B) {
			st := benchStore(b, d)
			got := make(chan *singleton.Instance[counter], 1)
			n, err := singleton.NewNode(singleton.NodeConfig{Store: st, HolderID: "bench",
				LeaseDuration: 10 * time.Second, RenewInterval: 2 * time.Second, AcquireInterval: 50 * time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			if err := singleton.Register(n, singleton.Config[counter]{Name: "bench",
				Body: func(ctx context.Context, in *singleton.Instance[counter]) error { got <- in; <-ctx.Done(); return nil }}); err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = n.Run(ctx) }()
			defer func() { cancel(); <-done }()
			in := <-got
			b.ResetTimer()
			for i := range b.N {
				if err := in.Save(ctx, counter{N: i}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchStore(b *testing.B, dialect string) *sqlstore.Store {
	b.Helper()
	var st *sqlstore.Store
	switch dialect {
	case "sqlite":
		st = dbtest.SQLite(b)
	default:
		st = postgresStore(b)
	}
	return st
}

// BenchmarkHeldSingletons measures how many singletons one node can hold:
// it registers b.N singletons on one node (lease 2 s, renewed every 500 ms:
// b.N × 2 renewals/s), lets them run for 5 s and reports the renewals per
// second the node kept up and how many terms it lost (a renewal that fell
// behind its deadline). Run with fixed counts:
// go test -run '^$' -bench HeldSingletons -benchtime 200x ./singleton
func BenchmarkHeldSingletons(b *testing.B) {
	for _, d := range []string{"sqlite", "postgres"} {
		b.Run(d, func(b *testing.B) {
			st := benchStore(b, d)
			n, err := singleton.NewNode(singleton.NodeConfig{Store: st, HolderID: "bench",
				LeaseDuration: 2 * time.Second, RenewInterval: 500 * time.Millisecond, AcquireInterval: 100 * time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			var mu sync.Mutex
			started, lost := 0, 0
			for i := range b.N {
				if err := singleton.Register(n, singleton.Config[v1]{Name: fmt.Sprintf("s%d", i),
					OnStarted: func(context.Context, sqlease.Token) { mu.Lock(); started++; mu.Unlock() },
					OnStopped: func(sqlease.Token) { mu.Lock(); lost++; mu.Unlock() },
					Body:      func(ctx context.Context, in *singleton.Instance[v1]) error { <-ctx.Done(); return nil }}); err != nil {
					b.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = n.Run(ctx) }()
			deadline := time.Now().Add(30 * time.Second)
			for {
				mu.Lock()
				s := started
				mu.Unlock()
				if s >= b.N || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			mu.Lock()
			lostBefore := lost
			mu.Unlock()
			time.Sleep(5 * time.Second)
			mu.Lock()
			lostDuring := lost - lostBefore
			held := started - lost
			mu.Unlock()
			cancel()
			<-done
			b.ReportMetric(float64(held), "held")
			b.ReportMetric(float64(lostDuring), "lost/5s")
			b.ReportMetric(float64(held)*2, "renewals/s")
		})
	}
}
