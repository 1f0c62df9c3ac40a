package singleton_test

import (
	"context"
	"testing"
	"time"

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
		var err error
		st, err = sqliteStore(b)
		if err != nil {
			b.Fatal(err)
		}
	default:
		st = postgresStore(b)
	}
	return st
}
