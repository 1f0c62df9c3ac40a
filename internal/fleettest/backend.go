package fleettest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/sqlease/sqlease/internal/ledger"
	"github.com/sqlease/sqlease/sqlstore"
)

// Backend is the database a worker fleet shares with its test: the dialect
// and DSN the workers open (OpenStore), and the test's own pool and store.
type Backend struct {
	Dialect string
	DSN     string
	DB      *sql.DB // the test's own pool, closed when the test ends
	Store   *sqlstore.Store
}

// NewBackend opens dsn for t and migrates the store's tables (prefix) and
// the action ledger's. On PostgreSQL commits are made durable
// (synchronous_commit = on), as in production, so that what a worker saw
// committed survives an immediate server stop (pgtest's servers default to
// off).
func NewBackend(t testing.TB, dialect, dsn, prefix string) *Backend {
	t.Helper()
	ctx := context.Background()
	db, st, err := OpenStore(ctx, dialect, dsn, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if dialect == "postgres" {
		if _, err := db.ExecContext(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET synchronous_commit = on', current_database()); END $$`); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ledger.Migrate(ctx, db, dialect); err != nil {
		t.Fatal(err)
	}
	return &Backend{Dialect: dialect, DSN: dsn, DB: db, Store: st}
}
