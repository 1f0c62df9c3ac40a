package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/driverconn"
)

// SQLite lets one connection write at a time. A connection that finds the
// write lock taken waits in SQLite's busy handler, which sleeps 1, 2, 5,
// 10 … 100 ms between tries: writers of one process that queue there wake
// late, the lock stands free meanwhile, and a daemon delivering thousands
// of runs a second (its claims, starts and finishes all write) left a
// third of the machine idle. A pool opened by Open therefore queues its own
// writers in Go first (writeGate), one at a time, each woken the moment
// the one before it is done; the busy handler then waits only for other
// processes. Reads, which WAL lets run beside the writer, are not queued.
//
// A transaction holds the gate from BEGIN (IMMEDIATE: it takes the write
// lock at once) to COMMIT or ROLLBACK; a statement outside one holds it
// while it runs, a query until its rows are closed. Which statements write
// is read from their text (writes); a read taken for a write only waits
// its turn, and a write taken for a read only waits as it did before, in
// the busy handler.

// writeGate is a pool's queue of writers.
type writeGate struct {
	slot    chan struct{}
	timeout time.Duration // the busy timeout: a writer waits no longer here
	ckpt    *checkpointer // told of each write; nil: none (checkpoint.go)
}

func newWriteGate(timeout time.Duration) *writeGate {
	return &writeGate{slot: make(chan struct{}, 1), timeout: timeout}
}

// errGateTimeout is the gate's SQLITE_BUSY: a writer of this process held
// the write lock for the whole busy timeout.
var errGateTimeout = fmt.Errorf("%w: sqlite: another writer of this process held the database for the busy timeout", sqlease.ErrTransient)

func (g *writeGate) acquire(ctx context.Context) error {
	if g.ckpt != nil {
		if err := g.ckpt.hold(ctx); err != nil {
			return err
		}
	}
	select {
	case g.slot <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(g.timeout)
	defer t.Stop()
	select {
	case g.slot <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return errGateTimeout
	}
}

// release ends a write.
func (g *writeGate) release() {
	<-g.slot
	if g.ckpt != nil {
		g.ckpt.wrote()
	}
}

// writeWords are the statements that write the database or may.
var writeWords = regexp.MustCompile(`(?i)\b(insert|update|delete|replace|create|drop|alter|pragma|vacuum|reindex|analyze)\b`)

// writesCache remembers writes' answer per statement text: the store runs
// a fixed set of statements. It keeps at most writesCacheMax: a pool that
// also runs SQL built per call (an IN list of any length) would otherwise
// grow it without end.
var (
	writesCache  sync.Map // string → bool
	writesCached atomic.Int64
)

const writesCacheMax = 4096

// writes reports whether the statement query may write.
func writes(query string) bool {
	if w, ok := writesCache.Load(query); ok {
		return w.(bool)
	}
	w := writeWords.MatchString(query)
	if writesCached.Load() < writesCacheMax {
		if _, loaded := writesCache.LoadOrStore(query, w); !loaded {
			writesCached.Add(1)
		}
	}
	return w
}

// connector opens the driver's connections wrapped to pass the gate.
type connector struct {
	driver.Connector
	gate *writeGate
}

// Close stops the pool's checkpointer: sql.DB.Close calls it.
func (c connector) Close() error {
	if c.gate.ckpt != nil {
		c.gate.ckpt.close()
	}
	return nil
}

func (c connector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	g, err := newGatedConn(conn, c.gate)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return g, nil
}

// gatedConn is a driver connection whose writers pass the pool's gate. It
// implements the optional interfaces of the driver's connection that
// database/sql uses; each call comes from one goroutine at a time.
type gatedConn struct {
	driverconn.Conn

	gate *writeGate
	inTx bool // a transaction of this connection holds the gate
}

var _ driverconn.Full = (*gatedConn)(nil)

func newGatedConn(conn driver.Conn, gate *writeGate) (*gatedConn, error) {
	dc, err := driverconn.Of("sqlite", conn)
	if err != nil {
		return nil, err
	}
	return &gatedConn{Conn: dc, gate: gate}, nil
}

func (c *gatedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if err := c.gate.acquire(ctx); err != nil {
		return nil, err
	}
	tx, err := c.BeginTxer.BeginTx(ctx, opts)
	if err != nil {
		c.gate.release()
		return nil, err
	}
	c.inTx = true
	return &gatedTx{Tx: tx, c: c}, nil
}

// Begin is BeginTx with the default options (driver.Conn).
func (c *gatedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// end releases the gate a transaction of c held.
func (c *gatedConn) end() {
	if c.inTx {
		c.inTx = false
		c.gate.release()
	}
}

// Close closes the connection, releasing the gate if a transaction left
// open on it held it.
func (c *gatedConn) Close() error {
	err := c.Conn.Close()
	c.end()
	return err
}

// pass takes the gate for a statement outside a transaction that writes;
// done gives it back, and is nil when none was taken.
func (c *gatedConn) pass(ctx context.Context, query string) (done func(), err error) {
	if c.inTx || !writes(query) {
		return nil, nil
	}
	if err := c.gate.acquire(ctx); err != nil {
		return nil, err
	}
	return c.gate.release, nil
}

// gated ends a query's pass when its rows are closed. Rows that took no
// pass stay the driver's own, with the optional interfaces database/sql
// looks for.
func gated(rows driver.Rows, err error, done func()) (driver.Rows, error) {
	switch {
	case done == nil:
		return rows, err
	case err != nil:
		done()
		return nil, err
	}
	return &gatedRows{Rows: rows, done: done}, nil
}

func (c *gatedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	done, err := c.pass(ctx, query)
	if err != nil {
		return nil, err
	}
	if done != nil {
		defer done()
	}
	return c.Execer.ExecContext(ctx, query, args)
}

func (c *gatedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	done, err := c.pass(ctx, query)
	if err != nil {
		return nil, err
	}
	rows, err := c.Queryer.QueryContext(ctx, query, args)
	return gated(rows, err, done)
}

func (c *gatedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	st, err := c.Preparer.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	exec, ok1 := st.(driver.StmtExecContext)
	q, ok2 := st.(driver.StmtQueryContext)
	if !ok1 || !ok2 {
		st.Close()
		return nil, errors.New("sqlite: the driver's statement lacks an interface database/sql uses (driver version changed?)")
	}
	return &gatedStmt{Stmt: st, exec: exec, query: q, c: c, text: query}, nil
}

// gatedTx gives the gate back when the transaction ends, however it ends.
type gatedTx struct {
	driver.Tx
	c *gatedConn
}

func (t *gatedTx) Commit() error {
	defer t.c.end()
	return t.Tx.Commit()
}

func (t *gatedTx) Rollback() error {
	defer t.c.end()
	return t.Tx.Rollback()
}

// gatedRows holds the gate of a writing query until it is closed: SQLite
// keeps the write lock until the statement is reset.
type gatedRows struct {
	driver.Rows
	once sync.Once
	done func()
}

func (r *gatedRows) Close() error {
	err := r.Rows.Close()
	r.once.Do(r.done)
	return err
}

// gatedStmt is a prepared statement whose executions outside a
// transaction pass the gate as the connection's own do.
type gatedStmt struct {
	driver.Stmt
	exec  driver.StmtExecContext
	query driver.StmtQueryContext
	c     *gatedConn
	text  string
}

func (s *gatedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	done, err := s.c.pass(ctx, s.text)
	if err != nil {
		return nil, err
	}
	if done != nil {
		defer done()
	}
	return s.exec.ExecContext(ctx, args)
}

func (s *gatedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	done, err := s.c.pass(ctx, s.text)
	if err != nil {
		return nil, err
	}
	rows, err := s.query.QueryContext(ctx, args)
	return gated(rows, err, done)
}
