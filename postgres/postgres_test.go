package postgres_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/sqlstore"
	"github.com/sqlease/sqlease/storetest"
)

// database is where the conformance suite and the other tests run. Each
// store gets tables of its own, under a random prefix, dropped when the
// test ends.
var database = storetest.Database{
	Env: "SQLEASE_TEST_POSTGRES_URL",
	Hint: "run scripts/test.sh, which starts a private PostgreSQL and sets it, " +
		"or set it yourself, e.g. SQLEASE_TEST_POSTGRES_URL='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable'",
	Tables: storetest.Tables{
		List: `SELECT quote_ident(tablename) FROM pg_tables
WHERE schemaname = current_schema() AND left(tablename, length($1)) = $1`,
		Args: func(like string) []any { return []any{like} },
		Drop: "DROP TABLE IF EXISTS", DropSuffix: "CASCADE",
	},
	Open: postgres.OpenStore,
}

func databaseURL(tb testing.TB) string { return database.URL(tb) }

// newStore opens a store on tables under a fresh random prefix.
func newStore(tb testing.TB) *sqlstore.Store { s, _ := database.Store(tb); return s }

// newStoreWithPrefix is newStore, also returning the prefix.
func newStoreWithPrefix(tb testing.TB) (*sqlstore.Store, string) { return database.Store(tb) }

func TestConformance(t *testing.T) {
	databaseURL(t)
	storetest.Run(t, storetest.Harness{New: func(t *testing.T) *sqlstore.Store { return newStore(t) }, AbortsFrozenFence: true})
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		code      string
		transient bool
	}{
		{"08006", true},  // connection_failure
		{"08001", true},  // sqlclient_unable_to_establish_sqlconnection
		{"40001", true},  // serialization_failure
		{"40P01", true},  // deadlock_detected
		{"57P01", true},  // admin_shutdown
		{"53300", true},  // too_many_connections
		{"23505", false}, // unique_violation
		{"42P01", false}, // undefined_table
		{"22001", false}, // string_data_right_truncation
	} {
		pe := &pgconn.PgError{Severity: "ERROR", Code: tc.code, Message: "synthetic"}
		for _, err := range []error{pe, fmt.Errorf("renew: %w", pe)} {
			got := postgres.Classify(err)
			if errors.Is(got, sqlease.ErrTransient) != tc.transient {
				t.Errorf("Classify(%v) = %v, transient = %v, want %v", err, got, !tc.transient, tc.transient)
			}
			var back *pgconn.PgError
			if !errors.As(got, &back) || back.Code != tc.code {
				t.Errorf("Classify(%v) = %v lost the *pgconn.PgError", err, got)
			}
		}
	}
}

// TestOffline runs the scenarios every dialect shares that need no
// database: invalid prefixes, an empty connection string, Classify of errors
// that are not the driver's.
func TestOffline(t *testing.T) {
	storetest.Offline(t, storetest.Constructors{Dialect: postgres.Dialect, New: postgres.New, Open: postgres.Open, OpenStore: postgres.OpenStore,
		Classify: postgres.Classify, DSN: "postgres://u:p@127.0.0.1:1/db", Quoting: []string{`a"`}})
}

func BenchmarkStore(b *testing.B) { storetest.Bench(b, newStore) }
