package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// Checkpoints out of the writers' way.
//
// In WAL mode SQLite copies the log back into the database file (a
// checkpoint) once the log holds wal_autocheckpoint pages (1,000), in the
// COMMIT that crossed the mark: inside the pool's gate, every other writer
// of the pool queued behind it. A checkpoint fsyncs the log and then the
// database file, which the commits themselves do not (synchronous=NORMAL),
// and the log's fsync flushes the ~4 MB written since the last one: 4–70
// ms on the shared test machine (strace), 9 times a second at 1,000 on-time
// jobs/s. The on-time bench's late starts on SQLite came in the shadow of
// those fsyncs, and so did the commits' tail: 3,000 paced write
// transactions a second from 8 goroutines waited p99 8–84 ms, max up to
// 110 ms.
//
// A pool opened by Open checkpoints from a connection of its own instead
// (checkpointer). Every 128 writes it runs a PASSIVE checkpoint beside the
// writers, which does the bulk: the copying and the fsync of the 4 MB.
// When the log then holds 1,000 frames or more (SQLite's own mark: the log
// as long as before), it takes the gate for a second PASSIVE checkpoint,
// which copies only what was written meanwhile (a few dozen frames: two
// fsyncs of little, ~6 ms), so that the next writer finds the whole log
// copied and starts it over from its beginning. A passive checkpoint alone
// never lets the log restart under a steady stream of writes, new frames
// always following the last it copied: the log grew to 19 MB after 2,048
// writes of 3 KB. The pool's connections keep SQLite's automatic
// checkpoint as a backstop, at 10,000 pages: should the checkpointer fail
// (it has no one to report to) or fall behind, the log stays bounded as
// before, only longer.
//
// Durability is SQLite's own, unchanged: the checkpoints are SQLite's, with
// their fsyncs, run by another connection at another moment; a commit
// still does not fsync (synchronous=NORMAL), and the log restarts only
// after a checkpoint that copied all of it and fsynced the database file.
type walSettings struct {
	every    int64 // writes of the pool between two checkpoints
	restart  int64 // frames in the log from which the checkpointer makes it restart
	backstop int64 // pages in the log from which a commit checkpoints (wal_autocheckpoint)
}

var defaultWAL = walSettings{
	every:    128,
	restart:  1000,   // SQLite's default automatic checkpoint: the log as long as before
	backstop: 10_000, // 40 MB of log with 4 KB pages
}

// checkpointer checkpoints a pool's database from a connection outside
// the pool.
type checkpointer struct {
	connector driver.Connector // the driver's own: not gated
	gate      *writeGate
	every     int64 // writes between checkpoints
	restart   int64 // log frames from which the log is made to restart

	writes atomic.Int64
	kick   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func newCheckpointer(c driver.Connector, gate *writeGate, every, restart int64) *checkpointer {
	ctx, cancel := context.WithCancel(context.Background())
	cp := &checkpointer{connector: c, gate: gate, every: every, restart: restart,
		kick: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go cp.run()
	return cp
}

// wrote counts a write of the pool (the gate calls it as the write ends).
func (cp *checkpointer) wrote() {
	if cp.writes.Add(1)%cp.every == 0 {
		select {
		case cp.kick <- struct{}{}:
		default:
		}
	}
}

// close stops the checkpointer and closes its connection.
func (cp *checkpointer) close() {
	cp.once.Do(cp.cancel)
	<-cp.done
}

func (cp *checkpointer) run() {
	defer close(cp.done)
	var conn driver.Conn // opened at the first checkpoint: a pool that writes little never opens it
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		select {
		case <-cp.ctx.Done():
			return
		case <-cp.kick:
		}
		if conn == nil {
			c, err := cp.connector.Connect(cp.ctx)
			if err != nil {
				continue // the backstop keeps the log bounded; the next kick tries again
			}
			conn = c
		}
		frames, err := checkpoint(cp.ctx, conn)
		if err == nil && frames >= cp.restart && cp.gate.acquire(cp.ctx) == nil {
			_, err = checkpoint(cp.ctx, conn)
			cp.gate.leave()
		}
		if err != nil {
			conn.Close() // a fresh connection at the next kick
			conn = nil
		}
	}
}

// checkpoint runs a PASSIVE checkpoint on conn and returns the frames the
// log holds. A checkpoint of another connection running at the same time
// makes it return at once, having copied nothing: not an error.
func checkpoint(ctx context.Context, conn driver.Conn) (frames int64, err error) {
	q, ok := conn.(driver.QueryerContext)
	if !ok {
		return 0, errors.New("sqlite: the driver's connection cannot query")
	}
	rows, err := q.QueryContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`, nil)
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	defer rows.Close()
	v := make([]driver.Value, 3) // busy, frames in the log, frames copied
	if err := rows.Next(v); err != nil {
		if err == io.EOF {
			return 0, errors.New("checkpoint: no answer")
		}
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	frames, _ = v[1].(int64)
	return frames, nil
}
