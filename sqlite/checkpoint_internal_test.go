package sqlite

import (
	"bytes"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func openTestWAL(t *testing.T, path string, wal walSettings) (*sql.DB, *checkpointer) {
	t.Helper()
	db, cp, err := openWAL(path, DefaultBusyTimeout, DefaultBusyTimeout, wal)
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

// flatOut writes n rows of 3 KB (a page each, and its share of the
// index's) from each of writers goroutines, as fast as they go.
func flatOut(t *testing.T, db *sql.DB, writers, n int) {
	t.Helper()
	blob := bytes.Repeat([]byte{7}, 3000)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range n {
				if _, err := db.ExecContext(t.Context(), `INSERT INTO t (id, b) VALUES (?, ?)`, w*n+i, blob); err != nil {
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
}

// walFrames is the length of the log file in frames: its longest so far,
// since the log is reused from its beginning when it starts over, never
// truncated.
func walFrames(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size() / frameSize
}

// Under a flat-out stream of writes from several writers of a pool the log
// stays bounded: the commits' own checkpoint (in the gate, from 200 frames
// here) still makes it start over, the checkpointer beside them having
// copied most of it. Without the commits' checkpoint the checkpointer's
// passive ones alone seldom find a moment with the whole log copied, and it
// grows towards the ~12,000 frames written; with them but without the
// writers' wait for a long checkpoint of the checkpointer's (hold),
// 1,128-7,302 in 10 runs.
func TestLogBoundedUnderFlatOutWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wal.db")
	wal := walSettings{kick: 32, auto: 200}
	db, _ := openTestWAL(t, path, wal)
	const writers, each = 4, 1500
	start := time.Now()
	flatOut(t, db, writers, each)
	frames := walFrames(t, path)
	t.Logf("%d writes in %s; the log's longest: %d frames", writers*each, time.Since(start).Round(time.Millisecond), frames)
	if bound := 5 * wal.auto; frames > bound {
		t.Errorf("the log reached %d frames under %d flat-out writes, want at most %d (the commits checkpoint from %d)",
			frames, writers*each, bound, wal.auto)
	}
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM t`).Scan(&n); err != nil || n != writers*each {
		t.Fatalf("rows = %d (%v), want %d", n, err, writers*each)
	}
}

// The checkpointer copies the log into the database file beside the
// writers: with the commits' own checkpoint far away (10,000 frames),
// after a few hundred writes the file holds most of the rows. Without the
// checkpointer it keeps its first pages until the log reaches 10,000
// frames.
func TestCheckpointerCopiesTheLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "copy.db")
	wal := walSettings{kick: 32, auto: 10_000}
	db, _ := openTestWAL(t, path, wal)
	var auto int64
	if err := db.QueryRowContext(t.Context(), `PRAGMA wal_autocheckpoint`).Scan(&auto); err != nil || auto != wal.auto {
		t.Fatalf("wal_autocheckpoint = %d (%v), want %d", auto, err, wal.auto)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	const writes = 300
	flatOut(t, db, 1, writes)
	// Most rows, at least, are in the file soon (a page each).
	want := before.Size() + writes/2*4096
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

// Closing the pool stops its checkpointer, also one in a checkpoint a
// reader holds up, and closes its connection.
func TestCheckpointerStopsWithThePool(t *testing.T) {
	db, cp, err := openWAL(filepath.Join(t.TempDir(), "stop.db"), DefaultBusyTimeout, DefaultBusyTimeout, walSettings{kick: 1, auto: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := db.Exec(`INSERT INTO t (id) VALUES (?)`, i); err != nil {
			t.Fatal(err)
		}
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
