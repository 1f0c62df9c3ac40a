package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
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

// TestConcurrentMigrate: a fleet starting at once on a fresh database
// migrates it without errors (the migrations run under an advisory lock).
func TestConcurrentMigrate(t *testing.T) { database.ConcurrentMigrate(t, postgres.Dialect) }

func TestClassify(t *testing.T) {
	pgError := func(code string) *pgconn.PgError {
		return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "synthetic"}
	}
	storetest.ClassifyDriverErrors(t, postgres.Classify, map[*pgconn.PgError]bool{
		pgError("08006"): true,  // connection_failure
		pgError("08001"): true,  // sqlclient_unable_to_establish_sqlconnection
		pgError("40001"): true,  // serialization_failure
		pgError("40P01"): true,  // deadlock_detected
		pgError("57P01"): true,  // admin_shutdown
		pgError("53300"): true,  // too_many_connections
		pgError("23505"): false, // unique_violation
		pgError("42P01"): false, // undefined_table
		pgError("22001"): false, // string_data_right_truncation
	}, func(a, b *pgconn.PgError) bool { return a.Code == b.Code })
}

// TestOffline runs the scenarios every dialect shares that need no
// database: invalid prefixes, an empty connection string, Classify of errors
// that are not the driver's.
func TestOffline(t *testing.T) {
	storetest.Offline(t, storetest.Constructors{Dialect: postgres.Dialect, New: postgres.New, Open: postgres.Open, OpenStore: postgres.OpenStore,
		Classify: postgres.Classify, DSN: "postgres://u:p@127.0.0.1:1/db", Quoting: []string{`a"`}})
}

func BenchmarkStore(b *testing.B) { storetest.Bench(b, newStore) }
