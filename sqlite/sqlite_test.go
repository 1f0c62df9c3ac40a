package sqlite_test

import (
	"database/sql"
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlite"
	"github.com/sqlease/sqlease/sqlstore"
	"github.com/sqlease/sqlease/storetest"
)

// newStore opens a store on a fresh database file.
func newStore(tb testing.TB) *sqlstore.Store {
	return openFile(tb, filepath.Join(tb.TempDir(), "sqlease.db"))
}

// openFile opens the store on the database file at path (tables prefixed
// sqlease), closed when tb ends.
func openFile(tb testing.TB, path string) *sqlstore.Store {
	tb.Helper()
	s, err := sqlite.OpenStore(tb.Context(), path, "sqlease")
	if err != nil {
		tb.Fatalf("OpenStore %s: %v", path, err)
	}
	tb.Cleanup(func() { s.DB().Close() })
	return s
}

// oldFile makes a database file of this version and takes it back to an
// earlier one with the statements undo, in order; it returns its path, with
// no connection open.
func oldFile(t *testing.T, undo ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "old.db")
	db := openFile(t, path).DB()
	for _, q := range undo {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	return path
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{New: func(t *testing.T) *sqlstore.Store { return newStore(t) }, TimeResolution: time.Millisecond})
}

func TestDSN(t *testing.T) {
	dsn := sqlite.DSN("/tmp/x.db", 0)
	path, query, ok := strings.Cut(dsn, "?")
	if !ok || path != "file:/tmp/x.db" {
		t.Fatalf("DSN = %q, want file:/tmp/x.db?…", dsn)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatalf("DSN query %q: %v", query, err)
	}
	pragmas := strings.Join(q["_pragma"], " ")
	for _, want := range []string{"journal_mode(WAL)", "busy_timeout(5000)"} {
		if !strings.Contains(pragmas, want) {
			t.Errorf("DSN pragmas %q lack %s", pragmas, want)
		}
	}
	if got := q.Get("_txlock"); got != "immediate" {
		t.Errorf("DSN _txlock = %q, want immediate", got)
	}
	if got := sqlite.DSN("/tmp/x.db", 250*time.Millisecond); !strings.Contains(got, "busy_timeout%28250%29") {
		t.Errorf("DSN with 250ms busy timeout = %q", got)
	}
}

// TestOpenSettings checks that the settings of the DSN take effect on every
// pooled connection: WAL, the busy timeout, and transactions that take the
// write lock at BEGIN.
func TestOpenSettings(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "settings.db")
	db := openFile(t, path).DB()
	var mode string
	var busy int
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q (%v), want wal", mode, err)
	}
	if err := db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil || busy != int(sqlite.DefaultBusyTimeout/time.Millisecond) {
		t.Errorf("busy_timeout = %d (%v), want %d", busy, err, sqlite.DefaultBusyTimeout.Milliseconds())
	}

	// An empty transaction already holds the write lock: a writer on another
	// connection with a short busy timeout fails with SQLITE_BUSY, which
	// Classify marks transient.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	other, err := sqlite.New(openWith(t, path, 50*time.Millisecond), "sqlease")
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.Acquire(ctx, "x", "h", time.Second)
	if !errors.Is(err, sqlease.ErrTransient) {
		t.Fatalf("Acquire while another connection's transaction is open = %v, want ErrTransient (SQLITE_BUSY)", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Acquire(ctx, "x", "h", time.Second); err != nil {
		t.Fatalf("Acquire after the transaction ended: %v", err)
	}
}

func openWith(t *testing.T, path string, busy time.Duration) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", sqlite.DSN(path, busy))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestOffline runs the scenarios every dialect shares that need no
// database: invalid prefixes, an empty connection string, Classify of errors
// that are not the driver's.
func TestOffline(t *testing.T) {
	storetest.Offline(t, storetest.Constructors{Dialect: sqlite.Dialect, New: sqlite.New, Open: sqlite.Open, OpenStore: sqlite.OpenStore,
		Classify: sqlite.Classify, DSN: "/nonexistent/sqlease.db", Quoting: []string{"a'"}})
}

func BenchmarkStore(b *testing.B) { storetest.Bench(b, newStore) }
