// Package dbtest gives a test a store on every dialect this machine can
// run, the same way in every package: SQLite always, PostgreSQL when
// SQLEASE_TEST_POSTGRES_URL is set and MariaDB/MySQL when
// SQLEASE_TEST_MYSQL_URL is set (scripts/test.sh sets both). SQL Server
// runs only where its own package's tests find SQLEASE_TEST_SQLSERVER_DSN.
package dbtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/mysqltest"
	"github.com/sqlease/sqlease/internal/pgtest"
	"github.com/sqlease/sqlease/internal/waitfor"
	"github.com/sqlease/sqlease/mysql"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/sqlite"
	"github.com/sqlease/sqlease/sqlstore"
)

// Prefix is the table prefix the tests' stores use.
const Prefix = "sqlease"

// Open opens a new store on one test database; every store Open returns
// in one subtest shares that database (two nodes, a restart), and each is
// closed when the test that opened it ends.
type Open func(t *testing.T) *sqlstore.Store

// Dialects runs fn as a subtest per dialect ("sqlite", "postgres",
// "mysql"), each with a database of its own. A server dialect whose URL is
// not set is skipped, saying which variable sets it.
func Dialects(t *testing.T, fn func(t *testing.T, open Open)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sqlease.db")
		fn(t, func(t *testing.T) *sqlstore.Store {
			t.Helper()
			return opened(t)(sqlite.OpenStore(context.Background(), path, Prefix))
		})
	})
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			dbURL := srv.database(t)
			fn(t, func(t *testing.T) *sqlstore.Store {
				t.Helper()
				return opened(t)(srv.open(context.Background(), dbURL, Prefix))
			})
		})
	}
}

// server is a database server the tests may use: its dialect's name, the
// variable that gives its URL, how a test database is made on it and how a
// store is opened on one.
type server struct {
	name, env string
	create    func(testing.TB, string) string
	open      func(context.Context, string, string) (*sqlstore.Store, error)
}

var (
	postgresServer = server{"postgres", pgtest.URLEnv, pgtest.CreateDatabase, postgres.OpenStore}
	mysqlServer    = server{"mysql", mysqltest.URLEnv, mysqltest.CreateDatabase, mysql.OpenStore}
	servers        = []server{postgresServer, mysqlServer}
)

// database is the URL of a fresh database on the server, dropped when the
// test ends; without the server's URL the test is skipped, saying which
// variable sets it.
func (srv server) database(t testing.TB) string {
	t.Helper()
	url := os.Getenv(srv.env)
	if url == "" {
		t.Skip(srv.env + " not set; bash scripts/test.sh sets it")
	}
	return srv.create(t, url)
}

// PostgresURL is the URL of a fresh database on the test PostgreSQL server;
// without SQLEASE_TEST_POSTGRES_URL the test is skipped.
func PostgresURL(t testing.TB) string {
	t.Helper()
	return postgresServer.database(t)
}

// MySQLURL is the URL of a fresh database on the test MariaDB/MySQL server;
// without SQLEASE_TEST_MYSQL_URL the test is skipped.
func MySQLURL(t testing.TB) string {
	t.Helper()
	return mysqlServer.database(t)
}

// Postgres is a store on a fresh database of the test PostgreSQL server,
// closed when the test ends; without the server the test is skipped.
func Postgres(t testing.TB) *sqlstore.Store {
	t.Helper()
	return OpenPostgres(t, PostgresURL(t))
}

// OpenPostgres is a store on the PostgreSQL database url (another node's
// store on a database of PostgresURL), closed when the test ends.
func OpenPostgres(t testing.TB, url string) *sqlstore.Store {
	t.Helper()
	return opened(t)(postgres.OpenStore(context.Background(), url, Prefix))
}

// SQLite is a store on a SQLite file of its own, closed when the test ends.
func SQLite(t testing.TB) *sqlstore.Store {
	t.Helper()
	return opened(t)(sqlite.OpenStore(context.Background(), filepath.Join(t.TempDir(), "sqlease.db"), Prefix))
}

// opened fails the test on err and closes the store when the test ends.
func opened(t testing.TB) func(*sqlstore.Store, error) *sqlstore.Store {
	return func(s *sqlstore.Store, err error) *sqlstore.Store {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.DB().Close() })
		return s
	}
}

// WaitFor polls cond every 5 ms and fails the test, naming what it waited
// for, when cond is still false after d.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	waitfor.Cond(t, d, 5*time.Millisecond, what, cond)
}
