package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Checkpoints beside the writers.
//
// In WAL mode SQLite copies the log back into the database file (a
// checkpoint) in the COMMIT that finds 1,000 frames or more in the log
// (wal_autocheckpoint): inside the pool's gate, every other writer of the
// pool queued behind it. A checkpoint fsyncs the log, then the database
// file, which the commits themselves do not (synchronous=NORMAL): with all
// of the ~4 MB written since the last one to flush, 4–70 ms on the shared
// test machine (strace -T), 9 times a second at 1,000 on-time jobs/s. The
// on-time bench's late starts on SQLite came in the shadow of those fsyncs.
//
// A pool opened by Open therefore also checkpoints from a connection of its
// own, outside the gate (checkpointer): once kick frames (128) of the log
// are not yet copied, it runs a PASSIVE checkpoint, which copies them and
// does the fsyncs while the writers go on; one left incomplete (a reader
// still needs older frames, or writers came meanwhile) is tried again
// shortly. The commit's own checkpoint stays as it was, SQLite's, at the
// same 1,000 frames, in the gate, and bounds the log as before, under a
// flat-out stream of writes too, but finds almost everything copied and
// flushed already — a few dozen frames and two short fsyncs — and when the
// writers pause long enough for a checkpoint of the whole log, the next
// writer starts the log over without one. A commit's checkpoint that
// finds the checkpointer's running gives up, though, so while one of the
// checkpointer's runs, writers wait once the log would pass the mark
// (hold), as they waited for the commit's checkpoint before; the next
// commit's checkpoint then copies the rest and the log starts over. The log stays
// bounded under a flat-out stream of writes: near the mark, up to 2.7
// times it in tests with a mark of 200 frames (4 writers of 3 KB rows).
//
// The checkpointer counts writes, not frames (SQLite tells a connection
// nothing of other connections' frames but through a checkpoint), and
// turns kick frames into writes by the frames per write its checkpoints
// saw: a claim of 512 jobs writes many pages, a lease renewal one or two.
// (Reading the WAL index's header from the -shm file would tell the frames
// exactly, but closing a descriptor of that file drops every POSIX lock of
// the process on it, SQLite's included.)
//
// Durability is unchanged: the checkpoints are SQLite's, with their fsyncs,
// run by another connection at another moment; a commit still does not
// fsync, and the log restarts only after a checkpoint copied all of it and
// fsynced the database file.
type walSettings struct {
	kick int64 // uncopied frames from which the checkpointer copies them
	auto int64 // wal_autocheckpoint of the pool's connections (the commit's checkpoint)
}

var defaultWAL = walSettings{kick: 128, auto: 1000}

// retryIncomplete is how soon a checkpoint that left frames uncopied is
// tried again when no write comes first.
const retryIncomplete = 10 * time.Millisecond

// checkpointer checkpoints a pool's database from a connection outside
// the pool and its gate.
type checkpointer struct {
	connector driver.Connector // the driver's own: not gated
	kick      int64
	auto      int64 // the commits' checkpoint (0: none)

	writes atomic.Int64 // the pool's writes so far
	// While a checkpoint runs, writers past limit (of writes) wait for
	// its end (running closes): the log's bound (hold).
	limit   atomic.Int64
	mu      sync.Mutex
	running chan struct{}

	poke   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func newCheckpointer(c driver.Connector, wal walSettings) *checkpointer {
	ctx, cancel := context.WithCancel(context.Background())
	cp := &checkpointer{connector: c, kick: wal.kick, auto: wal.auto,
		poke: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	cp.limit.Store(math.MaxInt64)
	go cp.run()
	return cp
}

// hold makes a writer of the pool wait while a checkpoint of the
// checkpointer's runs and the log, by its estimate, has reached the
// commits' mark: a checkpoint whose fsyncs stall (150 ms seen under load)
// holds off every commit's checkpoint meanwhile, and flat-out writers took
// the log from 15 frames to 1,309 (the mark: 200). A commit's checkpoint
// in the gate made writers wait likewise before.
func (cp *checkpointer) hold(ctx context.Context) error {
	if cp.writes.Load() < cp.limit.Load() {
		return nil
	}
	cp.mu.Lock()
	ch := cp.running
	cp.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// begin marks a checkpoint running, with the log at about frames and
// perWrite frames per write: writers past the commits' mark wait for its
// end (hold).
func (cp *checkpointer) begin(frames int64, perWrite float64) {
	cp.mu.Lock()
	cp.running = make(chan struct{})
	cp.mu.Unlock()
	if cp.auto > 0 {
		budget := max(float64(cp.auto-frames)/perWrite, 0)
		cp.limit.Store(cp.writes.Load() + int64(budget))
	}
}

// end marks the checkpoint ended and lets waiting writers go.
func (cp *checkpointer) end() {
	cp.limit.Store(math.MaxInt64)
	cp.mu.Lock()
	close(cp.running)
	cp.running = nil
	cp.mu.Unlock()
}

// wrote tells the checkpointer of a write of the pool (the gate, as the
// write ends).
func (cp *checkpointer) wrote() {
	cp.writes.Add(1)
	select {
	case cp.poke <- struct{}{}:
	default:
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
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	perWrite := 1.0         // frames per write, as the checkpoints saw them
	var seen, lastLog int64 // writes and log frames as of the last checkpoint
	retries := 0            // of an incomplete checkpoint, with no write since
	for {
		force := false
		select {
		case <-cp.ctx.Done():
			return
		case <-cp.poke:
		case <-retry.C:
			force = true
		}
		writes := cp.writes.Load() - seen
		if !force && float64(writes)*perWrite < float64(cp.kick) {
			continue
		}
		if conn == nil {
			c, err := cp.connector.Connect(cp.ctx)
			if err != nil {
				continue // the commits' own checkpoints keep the log bounded; the next write tries again
			}
			conn = c
		}
		cp.begin(lastLog+int64(float64(writes)*perWrite), perWrite)
		log, copied, err := checkpoint(cp.ctx, conn)
		cp.end()
		if err != nil {
			conn.Close() // a fresh connection next time
			conn = nil
			continue
		}
		if log < 0 { // another connection's checkpoint ran: none here
			retry.Reset(retryIncomplete)
			continue
		}
		// The log's new frames since the last checkpoint: all of them
		// when it started over meanwhile.
		fresh := log - lastLog
		if log < lastLog {
			fresh = log
		}
		if writes > 0 && fresh > 0 {
			perWrite = (perWrite + float64(fresh)/float64(writes)) / 2
		}
		seen, lastLog = seen+writes, log
		// Incomplete: writers came meanwhile (their writes kick the next
		// one), or a reader still needs older frames: tried again a few
		// times when no write comes.
		if writes > 0 {
			retries = 0
		}
		if copied < log && retries < 5 {
			retries++
			retry.Reset(retryIncomplete)
		}
	}
}

// checkpoint runs a PASSIVE checkpoint on conn and returns the frames the
// log holds and how many of them are copied. A checkpoint of another
// connection running at the same time makes it return at once, having
// copied nothing: not an error.
func checkpoint(ctx context.Context, conn driver.Conn) (log, copied int64, err error) {
	q, ok := conn.(driver.QueryerContext)
	if !ok {
		return 0, 0, errors.New("sqlite: the driver's connection cannot query")
	}
	rows, err := q.QueryContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("checkpoint: %w", err)
	}
	defer rows.Close()
	v := make([]driver.Value, 3) // busy, frames in the log, frames copied
	if err := rows.Next(v); err != nil {
		if err == io.EOF {
			return 0, 0, errors.New("checkpoint: no answer")
		}
		return 0, 0, fmt.Errorf("checkpoint: %w", err)
	}
	log, _ = v[1].(int64)
	copied, _ = v[2].(int64)
	return log, copied, nil
}
