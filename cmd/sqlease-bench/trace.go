package main

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// tracer is a database/sql connector wrapper that counts, per SQL text, the
// statements a pool sends, the rows they return and the wall time they take
// (round trip included), plus transactions and physical connections. It is
// only used with -trace and for the leader-memory scenario (to time the
// refresh queries): the headline throughput runs use the plain drivers.
type tracer struct {
	mu    sync.Mutex
	stmts map[string]*stmtStat

	begins, commits, rollbacks, connects atomic.Int64

	// onQuery, if set, is called after each query's rows are closed.
	onQuery func(query string, rows int, start time.Time, took time.Duration)
}

type stmtStat struct {
	Calls int64
	Rows  int64
	Total time.Duration
}

func newTracer() *tracer { return &tracer{stmts: map[string]*stmtStat{}} }

func (t *tracer) record(query string, rows int, start time.Time) {
	took := time.Since(start)
	t.mu.Lock()
	s := t.stmts[query]
	if s == nil {
		s = &stmtStat{}
		t.stmts[query] = s
	}
	s.Calls++
	s.Rows += int64(rows)
	s.Total += took
	f := t.onQuery
	t.mu.Unlock()
	if f != nil {
		f(query, rows, start, took)
	}
}

// snapshot returns the per-statement figures and the counters.
type traceSnapshot struct {
	Stmts                                map[string]stmtStat
	Begins, Commits, Rollbacks, Connects int64
}

func (t *tracer) snapshot() traceSnapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := traceSnapshot{Stmts: map[string]stmtStat{}, Begins: t.begins.Load(), Commits: t.commits.Load(),
		Rollbacks: t.rollbacks.Load(), Connects: t.connects.Load()}
	for q, s := range t.stmts {
		out.Stmts[q] = *s
	}
	return out
}

// merge adds o into s.
func (s *traceSnapshot) merge(o traceSnapshot) {
	if s.Stmts == nil {
		s.Stmts = map[string]stmtStat{}
	}
	for q, v := range o.Stmts {
		cur := s.Stmts[q]
		cur.Calls += v.Calls
		cur.Rows += v.Rows
		cur.Total += v.Total
		s.Stmts[q] = cur
	}
	s.Begins += o.Begins
	s.Commits += o.Commits
	s.Rollbacks += o.Rollbacks
	s.Connects += o.Connects
}

type namedStat struct {
	Name string
	stmtStat
}

// sorted returns the statements by call count, named by the caller's labels.
func (s traceSnapshot) sorted(label func(string) string) []namedStat {
	agg := map[string]stmtStat{}
	for q, v := range s.Stmts {
		n := label(q)
		cur := agg[n]
		cur.Calls += v.Calls
		cur.Rows += v.Rows
		cur.Total += v.Total
		agg[n] = cur
	}
	out := make([]namedStat, 0, len(agg))
	for n, v := range agg {
		out = append(out, namedStat{n, v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Calls != out[j].Calls {
			return out[i].Calls > out[j].Calls
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// tracedConnector wraps a driver.Connector.
type tracedConnector struct {
	driver.Connector
	t *tracer
}

func (c tracedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	c.t.connects.Add(1)
	return &tracedConn{Conn: conn, t: c.t}, nil
}

// tracedConn forwards to the driver's connection, which must implement the
// context interfaces (pgx stdlib and modernc.org/sqlite both do).
type tracedConn struct {
	driver.Conn
	t *tracer
}

var (
	_ driver.ExecerContext      = (*tracedConn)(nil)
	_ driver.QueryerContext     = (*tracedConn)(nil)
	_ driver.ConnBeginTx        = (*tracedConn)(nil)
	_ driver.NamedValueChecker  = (*tracedConn)(nil)
	_ driver.SessionResetter    = (*tracedConn)(nil)
	_ driver.Validator          = (*tracedConn)(nil)
	_ driver.ConnPrepareContext = (*tracedConn)(nil)
)

func (c *tracedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return c.Conn.Prepare(query)
}

func (c *tracedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	start := time.Now()
	res, err := e.ExecContext(ctx, query, args)
	n := 0
	if err == nil {
		if a, aerr := res.RowsAffected(); aerr == nil {
			n = int(a)
		}
	}
	c.t.record(query, n, start)
	return res, err
}

func (c *tracedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	start := time.Now()
	rows, err := q.QueryContext(ctx, query, args)
	if err != nil {
		c.t.record(query, 0, start)
		return nil, err
	}
	return &tracedRows{Rows: rows, t: c.t, query: query, start: start}, nil
}

func (c *tracedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	b, ok := c.Conn.(driver.ConnBeginTx)
	if !ok {
		return nil, errors.New("trace: driver connection lacks BeginTx")
	}
	start := time.Now()
	tx, err := b.BeginTx(ctx, opts)
	c.t.record("BEGIN", 0, start)
	if err != nil {
		return nil, err
	}
	c.t.begins.Add(1)
	return &tracedTx{Tx: tx, t: c.t}, nil
}

func (c *tracedConn) CheckNamedValue(v *driver.NamedValue) error {
	if n, ok := c.Conn.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

func (c *tracedConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *tracedConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

type tracedTx struct {
	driver.Tx
	t *tracer
}

func (x *tracedTx) Commit() error {
	start := time.Now()
	err := x.Tx.Commit()
	x.t.record("COMMIT", 0, start)
	x.t.commits.Add(1)
	return err
}

func (x *tracedTx) Rollback() error {
	start := time.Now()
	err := x.Tx.Rollback()
	x.t.record("ROLLBACK", 0, start)
	x.t.rollbacks.Add(1)
	return err
}

// tracedRows counts rows and records the query when closed (the time then
// includes reading the result, as the caller experiences it).
type tracedRows struct {
	driver.Rows
	t     *tracer
	query string
	start time.Time
	n     int
	done  bool
}

func (r *tracedRows) Next(dest []driver.Value) error {
	err := r.Rows.Next(dest)
	if err == nil {
		r.n++
	} else if err == io.EOF {
		r.finish()
	}
	return err
}

func (r *tracedRows) finish() {
	if !r.done {
		r.done = true
		r.t.record(r.query, r.n, r.start)
	}
}

func (r *tracedRows) Close() error {
	err := r.Rows.Close()
	r.finish()
	return err
}

// oneLine squeezes a statement's whitespace, for labels.
func oneLine(q string) string { return strings.Join(strings.Fields(q), " ") }
