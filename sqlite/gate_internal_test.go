package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
)

// openTight opens a pool whose busy handler gives up after 1 ms: a writer
// that met another of the pool in SQLite, not in the gate, fails at once.
func openTight(t *testing.T, gateWait time.Duration) *sql.DB {
	t.Helper()
	db, err := open(filepath.Join(t.TempDir(), "gate.db"), time.Millisecond, gateWait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return db
}

// The pool's writers, in every form the store uses (transactions, plain
// statements, writes returning rows, prepared statements), queue in the
// gate: none meets another in SQLite's write lock, so none fails although
// SQLite would give up on a held lock after 1 ms. Without the gate most of
// them fail with SQLITE_BUSY.
func TestGateQueuesWriters(t *testing.T) {
	db := openTight(t, 10*time.Second)
	ctx := t.Context()
	const writers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				id := w*each + i
				var err error
				switch i % 4 {
				case 0: // a transaction that keeps the lock a while
					err = inTx(ctx, db, func(tx *sql.Tx) error {
						if _, err := tx.ExecContext(ctx, `INSERT INTO t (id, n) VALUES (?, 0)`, id); err != nil {
							return err
						}
						time.Sleep(2 * time.Millisecond)
						_, err := tx.ExecContext(ctx, `UPDATE t SET n = n + 1 WHERE id = ?`, id)
						return err
					})
				case 1:
					_, err = db.ExecContext(ctx, `INSERT INTO t (id, n) VALUES (?, 1)`, id)
				case 2:
					var n int
					err = db.QueryRowContext(ctx, `INSERT INTO t (id, n) VALUES (?, 1) RETURNING n`, id).Scan(&n)
				case 3:
					var st *sql.Stmt
					if st, err = db.PrepareContext(ctx, `INSERT INTO t (id, n) VALUES (?, 1)`); err == nil {
						_, err = st.ExecContext(ctx, id)
						st.Close()
					}
				}
				if err != nil {
					errs <- fmt.Errorf("writer %d, write %d: %w", w, i, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var rows, sum int
	if err := db.QueryRow(`SELECT count(*), sum(n) FROM t`).Scan(&rows, &sum); err != nil {
		t.Fatal(err)
	}
	if rows != writers*each || sum != writers*each {
		t.Errorf("table has %d rows summing to %d, want %d and %d", rows, sum, writers*each, writers*each)
	}
}

// Reads are not queued: WAL lets them run while a writer holds the lock.
func TestGateLetsReadsPass(t *testing.T) {
	db := openTight(t, 10*time.Second)
	ctx := t.Context()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO t (id, n) VALUES (1, 1)`); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var n int
	if err := db.QueryRowContext(rctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
		t.Fatalf("a read while a transaction holds the gate: %v", err)
	}
	if n != 0 {
		t.Errorf("the read saw %d rows of an uncommitted transaction", n)
	}
}

// A writer that waits for the gate longer than its limit fails as SQLite's
// busy timeout does, with an error that is transient (the store retries
// it); one whose context ends stops waiting. Neither changes anything. A
// query that writes holds the gate until its rows are closed.
func TestGateWaitEnds(t *testing.T) {
	db := openTight(t, 50*time.Millisecond)
	ctx := t.Context()
	rows, err := db.QueryContext(ctx, `INSERT INTO t (id, n) VALUES (1, 1), (2, 1) RETURNING id`)
	if err != nil {
		t.Fatal(err)
	}
	if !rows.Next() {
		t.Fatal("no row returned")
	}
	_, err = db.ExecContext(ctx, `INSERT INTO t (id, n) VALUES (3, 1)`)
	if !errors.Is(err, sqlease.ErrTransient) || !errors.Is(err, errGateTimeout) {
		t.Errorf("a write while a writing query's rows are open: %v, want the gate's transient timeout", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := db.ExecContext(cctx, `INSERT INTO t (id, n) VALUES (4, 1)`); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a write whose context ends while it waits for the gate: %v, want context.DeadlineExceeded", err)
	}
	rows.Close()
	if _, err := db.ExecContext(ctx, `INSERT INTO t (id, n) VALUES (5, 1)`); err != nil {
		t.Fatalf("a write after the rows closed: %v", err)
	}
	var ids []int
	r, err := db.Query(`SELECT id FROM t ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for r.Next() {
		var id int
		if err := r.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if fmt.Sprint(ids) != "[1 2 5]" {
		t.Errorf("rows %v, want [1 2 5]: the writes that failed at the gate wrote nothing", ids)
	}
}

// A transaction gives the gate back however it ends: commit, rollback, or
// its context ending (database/sql rolls it back).
func TestGateReleasedByEveryEnd(t *testing.T) {
	db := openTight(t, 2*time.Second)
	ctx := t.Context()
	for i, end := range []func(*sql.Tx, context.CancelFunc) error{
		func(tx *sql.Tx, _ context.CancelFunc) error { return tx.Commit() },
		func(tx *sql.Tx, _ context.CancelFunc) error { return tx.Rollback() },
		func(_ *sql.Tx, cancel context.CancelFunc) error { cancel(); return nil },
	} {
		tctx, cancel := context.WithCancel(ctx)
		tx, err := db.BeginTx(tctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(tctx, `INSERT INTO t (id, n) VALUES (?, 1)`, 100+i); err != nil {
			t.Fatal(err)
		}
		if err := end(tx, cancel); err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, err := db.ExecContext(ctx, `INSERT INTO t (id, n) VALUES (?, 1)`, i); err != nil {
			t.Fatalf("end %d: a write after the transaction ended: %v", i, err)
		}
	}
}

func inTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// Statement texts built per call do not grow the cache without end, and
// are still classified past its bound.
func TestWritesCacheBounded(t *testing.T) {
	for i := range writesCacheMax + 100 {
		if !writes(fmt.Sprintf(`DELETE FROM t WHERE id IN (%d)`, i)) {
			t.Fatalf("statement %d not taken for a write", i)
		}
	}
	if n := writesCached.Load(); n > writesCacheMax {
		t.Errorf("%d statements cached, want at most %d", n, writesCacheMax)
	}
}

func TestWrites(t *testing.T) {
	for q, want := range map[string]bool{
		`SELECT id FROM t WHERE last_updated_at > ?`:                 false,
		`WITH n AS (SELECT 1) UPDATE t SET n = 2`:                    true,
		`insert into t values (1, 1)`:                                true,
		`DELETE FROM t`:                                              true,
		`PRAGMA journal_mode(WAL)`:                                   true,
		`SELECT count(*), sum(n) FROM t WHERE n IN (SELECT 1)`:       false,
		`CREATE INDEX IF NOT EXISTS t_n ON t (n)`:                    true,
		`INSERT INTO t (id, n) VALUES (?, ?) ON CONFLICT DO NOTHING`: true,
	} {
		if got := writes(q); got != want {
			t.Errorf("writes(%q) = %v, want %v", q, got, want)
		}
	}
}
