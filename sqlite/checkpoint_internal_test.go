package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// smallWAL is the checkpointer's settings scaled down for a test: a
// checkpoint every 16 writes, the log restarted from 200 frames, SQLite's
// own automatic checkpoint only from 2,000.
var smallWAL = walSettings{every: 16, restart: 200, backstop: 2000}

func openSmallWAL(t *testing.T, path string) (*sql.DB, *checkpointer) {
	t.Helper()
	db, cp, err := openWAL(path, DefaultBusyTimeout, DefaultBusyTimeout, smallWAL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return db, cp
}

// frameSize is the bytes of one frame of the log: a 4 KB page and its
// 24-byte header.
const frameSize = 4096 + 24

// Under a steady stream of writes from several writers of a pool, the log
// stays near the checkpointer's restart mark: the checkpointer makes it
// start over although a writer is almost always at work. The log file keeps
// the length it reached at its longest (it is reused from its beginning,
// not truncated), so its length at the end is its longest. Without the
// checkpointer's step inside the gate, its passive checkpoints never let
// the log restart and it grows to SQLite's automatic checkpoint, 2,000
// frames; without the checkpointer, likewise.
func TestCheckpointerBoundsTheLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wal.db")
	db, _ := openSmallWAL(t, path)
	ctx := t.Context()
	const writers, each = 4, 400 // about 3 frames a write: ~4,800 frames
	blob := bytes.Repeat([]byte{7}, 3000)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if _, err := db.ExecContext(ctx, `INSERT INTO t (id, b) VALUES (?, ?)`, w*each+i, blob); err != nil {
					errs <- fmt.Errorf("writer %d, write %d: %w", w, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	frames := fi.Size() / frameSize
	t.Logf("the log's longest: %d frames", frames)
	if frames > 1000 {
		t.Errorf("the log reached %d frames (%d bytes) under %d writes, want at most 1000 (restart from %d, SQLite's own checkpoint from %d)",
			frames, fi.Size(), writers*each, smallWAL.restart, smallWAL.backstop)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != writers*each {
		t.Fatalf("rows = %d (%v), want %d", n, err, writers*each)
	}
}

// The pool's commits leave checkpoints to the checkpointer: its
// connections checkpoint by themselves only from the backstop on, and
// after a few dozen writes, far below it, the checkpointer has copied the
// log into the database file. Without the checkpointer the file keeps its
// first pages until the log reaches 2,000 frames.
func TestCheckpointerCopiesTheLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "copy.db")
	db, _ := openSmallWAL(t, path)
	ctx := t.Context()
	var auto int64
	if err := db.QueryRowContext(ctx, `PRAGMA wal_autocheckpoint`).Scan(&auto); err != nil || auto != smallWAL.backstop {
		t.Fatalf("wal_autocheckpoint = %d (%v), want %d", auto, err, smallWAL.backstop)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	const writes = 64 // each a page of its own (3 KB rows)
	blob := bytes.Repeat([]byte{7}, 3000)
	for i := range writes {
		if _, err := db.ExecContext(ctx, `INSERT INTO t (id, b) VALUES (?, ?)`, i, blob); err != nil {
			t.Fatal(err)
		}
	}
	// The checkpoints come every 16 writes: the rows up to the last of
	// them, at least, are in the file then.
	want := before.Size() + (writes-smallWAL.every)*4096
	deadline := time.Now().Add(10 * time.Second)
	for {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the database file is %d bytes 10 s after %d writes, want at least %d: the log was not copied", fi.Size(), writes, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Closing the pool stops its checkpointer, also one waiting in the gate
// behind a transaction left open (the gate's wait here is an hour): the
// checkpointer is kicked with a log past its restart mark while the
// transaction holds the gate, and the pool is closed before it ends.
func TestCheckpointerStopsWithThePool(t *testing.T) {
	wal := walSettings{every: 16, restart: 1, backstop: 2000}
	db, cp, err := openWAL(filepath.Join(t.TempDir(), "stop.db"), DefaultBusyTimeout, time.Hour, wal)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(context.Background(), nil) // holds the gate
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO t (id) VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	for range wal.every {
		cp.wrote() // a kick
	}
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	select {
	case <-cp.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the checkpointer runs on 10 s after db.Close")
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
