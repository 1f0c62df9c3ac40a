package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/pgtest"
	"github.com/sqlease/sqlease/postgres"
)

// TestPooledConnectionAfterRestart: a pooled connection left idle for more
// than a second, whose server restarted meanwhile, is replaced before a
// statement is sent on it. Open pings such a connection only after 30 s
// idle (for the idle load) and looks at its socket instead: a check that
// misses the closed socket (pgconn's CheckConn did) fails this test with
// "unexpected EOF".
func TestPooledConnectionAfterRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	srv := pgtest.Start(t)
	db, err := postgres.Open(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	for i := range 3 {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&n); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		srv.Stop(t)
		srv.Start(t)
		time.Sleep(1200*time.Millisecond - time.Since(t0)) // idle > 1 s: pgx's threshold
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&n); err != nil {
			t.Fatalf("restart %d: a statement on the pool after the server restarted: %v", i+1, err)
		}
	}
}
