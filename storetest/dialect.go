package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// What every dialect's tests share to get a store of their own: a random
// table prefix, the store opened under it, and its tables dropped when the
// test ends.

// RandomPrefix returns a fresh table prefix: t and 16 hex digits.
func RandomPrefix(tb testing.TB) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return "t" + hex.EncodeToString(b)
}

// Tables is how a dialect lists and drops the tables of a prefix.
type Tables struct {
	// List is a query returning the name of every table of the prefix,
	// quoted, one a row; its arguments are Args(prefix + "_").
	List string
	Args func(like string) []any
	// Drop starts the statement that drops them, and DropSuffix ends it:
	// "DROP TABLE IF EXISTS" … "CASCADE".
	Drop, DropSuffix string
}

// DropAll drops every table named prefix_…, whatever the migrations
// created.
func (tt Tables) DropAll(db *sql.DB, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, tt.List, tt.Args(prefix+"_")...)
	if err != nil {
		return err
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		names = append(names, n)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if err := rows.Err(); err != nil || len(names) == 0 {
		return err
	}
	stmt := tt.Drop + " " + strings.Join(names, ", ")
	if tt.DropSuffix != "" {
		stmt += " " + tt.DropSuffix
	}
	_, err = db.ExecContext(ctx, stmt)
	return err
}

// Database is the database a dialect's tests run on, named by an
// environment variable: each test gets a store on tables of its own.
type Database struct {
	Env  string // the variable, e.g. SQLEASE_TEST_POSTGRES_URL
	Hint string // the skip message when it is unset, after "<Env> is not set: "
	// Tables lists and drops the tables of a prefix.
	Tables Tables
	// Open opens a store on the database under a table prefix.
	Open func(ctx context.Context, url, prefix string) (*sqlstore.Store, error)
}

// URL returns the database's URL (or DSN); it skips tb when Env is unset.
func (d Database) URL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(d.Env)
	if u == "" {
		tb.Skipf("%s is not set: %s", d.Env, d.Hint)
	}
	return u
}

// Store opens a store on the database under a fresh prefix and drops its
// tables when tb ends. It returns the store and the prefix.
func (d Database) Store(tb testing.TB) (*sqlstore.Store, string) {
	tb.Helper()
	u := d.URL(tb)
	prefix := RandomPrefix(tb)
	s, err := d.Open(tb.Context(), u, prefix)
	if err != nil {
		tb.Fatalf("OpenStore: %v", err)
	}
	tb.Cleanup(func() {
		defer s.DB().Close()
		if err := d.Tables.DropAll(s.DB(), prefix); err != nil {
			tb.Errorf("drop tables of prefix %s: %v", prefix, err)
		}
	})
	return s, prefix
}

// ConcurrentMigrate checks that a fleet starting at once on a fresh
// database migrates it without errors: eight stores of dialect under one
// fresh prefix migrate at once, then one more time (the migrations are
// idempotent), on the database's pool.
func (d Database) ConcurrentMigrate(t *testing.T, dialect func(prefix string) (sqlstore.Dialect, error)) {
	s, _ := d.Store(t)
	prefix := RandomPrefix(t)
	t.Cleanup(func() {
		if err := d.Tables.DropAll(s.DB(), prefix); err != nil {
			t.Error(err)
		}
	})
	dl, err := dialect(prefix)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := sqlstore.New(s.DB(), dl).Migrate(t.Context()); err != nil {
				t.Errorf("concurrent Migrate: %v", err)
			}
		})
	}
	wg.Wait()
	if err := sqlstore.New(s.DB(), dl).Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate once more: %v", err)
	}
}

// Advisory returns an AdvisoryDialect.New on the database: a store under a
// fresh prefix (dropped when the test ends) and the session locker that
// locker makes for the database's URL and that prefix.
func (d Database) Advisory(locker func(url, prefix string) (sqlease.SessionLocker, error)) func(t *testing.T) (*sqlstore.Store, sqlease.SessionLocker, string) {
	return func(t *testing.T) (*sqlstore.Store, sqlease.SessionLocker, string) {
		t.Helper()
		s, prefix := d.Store(t)
		l, err := locker(d.URL(t), prefix)
		if err != nil {
			t.Fatalf("session locker: %v", err)
		}
		return s, l, prefix
	}
}
