package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// Constructors are a dialect package's exported entry points, for the
// scenarios every dialect shares that need no database ([Offline]).
type Constructors struct {
	Dialect   func(prefix string) (sqlstore.Dialect, error)
	New       func(db *sql.DB, prefix string) (*sqlstore.Store, error)
	Open      func(dsn string) (*sql.DB, error)
	OpenStore func(ctx context.Context, dsn, prefix string) (*sqlstore.Store, error)
	Classify  func(error) error
	// DSN is a well-formed connection string (or SQLite path) that nothing
	// answers at: OpenStore must refuse an invalid prefix before it
	// connects, so the refusal is the prefix's.
	DSN string
	// Quoting are prefixes that would end the dialect's quoted identifier
	// (a", a', a`, a]): invalid like every other bad prefix.
	Quoting []string
}

// Offline runs the scenarios every dialect shares that need no database:
// an invalid table prefix is refused by Dialect, New and OpenStore with
// ErrInvalidName, an empty connection string by Open with
// ErrInvalidConfig; Classify leaves nil and errors that are not the
// driver's as they are.
func Offline(t *testing.T, c Constructors) {
	t.Run("InvalidPrefix", func(t *testing.T) {
		bad := append([]string{"", "Sqlease", "1abc", "_abc", "a-b", "a b", "x;drop", strings.Repeat("a", 32)}, c.Quoting...)
		for _, p := range bad {
			if _, err := c.Dialect(p); !errors.Is(err, sqlease.ErrInvalidName) {
				t.Errorf("Dialect(%q) = %v, want ErrInvalidName", p, err)
			}
			if _, err := c.New(nil, p); !errors.Is(err, sqlease.ErrInvalidName) {
				t.Errorf("New(%q) = %v, want ErrInvalidName", p, err)
			}
			if _, err := c.OpenStore(t.Context(), c.DSN, p); !errors.Is(err, sqlease.ErrInvalidName) {
				t.Errorf("OpenStore(prefix %q) = %v, want ErrInvalidName", p, err)
			}
		}
		for _, p := range []string{"a", "sqlease", "app_1", strings.Repeat("a", 31)} {
			if _, err := c.Dialect(p); err != nil {
				t.Errorf("Dialect(%q) = %v, want nil", p, err)
			}
		}
		if _, err := c.Open(""); !errors.Is(err, sqlease.ErrInvalidConfig) {
			t.Errorf(`Open("") = %v, want ErrInvalidConfig`, err)
		}
	})
	t.Run("ClassifyPassesThrough", func(t *testing.T) {
		if err := c.Classify(nil); err != nil {
			t.Errorf("Classify(nil) = %v", err)
		}
		for _, plain := range []error{errors.New("plain"), context.Canceled, sql.ErrNoRows} {
			if err := c.Classify(plain); err != plain {
				t.Errorf("Classify(%v) = %v, want it unchanged", plain, err)
			}
		}
	})
}

// ClassifyDriverErrors checks classify on the driver's errors, each bare and
// wrapped: transient exactly where transient says so, and the driver's
// error still reachable with errors.As (one that same matches), so callers
// can read its code.
func ClassifyDriverErrors[E interface {
	error
	comparable
}](t *testing.T, classify func(error) error, transient map[E]bool, same func(a, b E) bool) {
	t.Helper()
	for e, want := range transient {
		for _, err := range []error{e, fmt.Errorf("renew: %w", e)} {
			got := classify(err)
			if errors.Is(got, sqlease.ErrTransient) != want {
				t.Errorf("Classify(%v) = %v, transient = %v, want %v", err, got, !want, want)
			}
			var back E
			if !errors.As(got, &back) || !same(back, e) {
				t.Errorf("Classify(%v) = %v lost the %T", err, got, e)
			}
		}
	}
}

// Bench runs [BenchAcquire], [BenchRenew] and [BenchFencedWrite], each on a
// store of its own from newStore.
func Bench(b *testing.B, newStore func(testing.TB) *sqlstore.Store) {
	b.Run("Acquire", func(b *testing.B) { BenchAcquire(b, newStore(b)) })
	b.Run("Renew", func(b *testing.B) { BenchRenew(b, newStore(b)) })
	b.Run("FencedWrite", func(b *testing.B) { BenchFencedWrite(b, newStore(b)) })
}
