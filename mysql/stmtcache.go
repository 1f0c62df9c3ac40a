package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlease/sqlease/internal/driverconn"
)

// The driver sends arguments as parameters of a prepared statement
// (interpolateParams=false, see fixed), and without a statement of the
// caller's it prepares one for every call and closes it after: three
// commands, a server-side parse and two round trips for each statement the
// store runs. A connection here keeps the statements it prepared, by SQL
// text, until it closes: the store's statements are a fixed set, so each is
// parsed once per connection (MariaDB, claim mode: 276 → 414 runs a second,
// go test -bench ClaimThroughput/mysql ./scheduler).

// maxCachedStmts bounds the statements one connection keeps (the server
// counts them against max_prepared_stmt_count, 16,382 by default, for all
// connections together); the oldest is closed to make room.
const maxCachedStmts = 128

// Server errors that ask for a statement to be prepared again.
const (
	errNeedReprepare     = 1615 // ER_NEED_REPREPARE: a table changed under it
	errMaxPreparedStmts  = 1461 // ER_MAX_PREPARED_STMT_COUNT_REACHED
	errUnknownStmtHandle = 1243 // ER_UNKNOWN_STMT_HANDLER
)

// stmtConn is a driver connection that keeps its prepared statements. It
// implements the optional interfaces of the driver's connection that
// database/sql uses; each call comes from one goroutine at a time (the
// pool's lock on the connection), so the cache needs no lock of its own.
type stmtConn struct {
	driverconn.Conn
	checkArg driver.NamedValueChecker

	stmts map[string]driver.Stmt
	order []string // prepare order, oldest first

	// readCommitted: the session's isolation level is READ COMMITTED, so
	// a transaction asking for it is begun without setting it first.
	readCommitted bool
}

var _ interface {
	driverconn.Full
	driver.NamedValueChecker
} = (*stmtConn)(nil)

// newStmtConn wraps conn, which must be the driver's connection.
func newStmtConn(conn driver.Conn) (*stmtConn, error) {
	dc, err := driverconn.Of("mysql", conn)
	if err != nil {
		return nil, err
	}
	checkArg, ok := conn.(driver.NamedValueChecker)
	if !ok {
		return nil, fmt.Errorf("mysql: the driver's connection (%T) lacks driver.NamedValueChecker (driver version changed?)", conn)
	}
	return &stmtConn{Conn: dc, checkArg: checkArg, stmts: map[string]driver.Stmt{}}, nil
}

func (c *stmtConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c.readCommitted && sql.IsolationLevel(opts.Isolation) == sql.LevelReadCommitted {
		opts.Isolation = driver.IsolationLevel(sql.LevelDefault)
	}
	return c.BeginTxer.BeginTx(ctx, opts)
}

func (c *stmtConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.Preparer.PrepareContext(ctx, query)
}

func (c *stmtConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.checkArg.CheckNamedValue(nv)
}

// Close closes the kept statements, then the connection.
func (c *stmtConn) Close() error {
	c.drop()
	return c.Conn.Close()
}

// ExecContext runs a statement with arguments through its kept prepared
// statement; one without goes as text, as the driver sends it.
func (c *stmtConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if len(args) == 0 {
		return c.Execer.ExecContext(ctx, query, args)
	}
	return withStmt(ctx, c, query, func(st driver.Stmt) (driver.Result, error) {
		return st.(driver.StmtExecContext).ExecContext(ctx, args)
	})
}

// QueryContext is ExecContext for statements that return rows. The rows
// do not close the statement: it stays for the next call.
func (c *stmtConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if len(args) == 0 {
		return c.Queryer.QueryContext(ctx, query, args)
	}
	return withStmt(ctx, c, query, func(st driver.Stmt) (driver.Rows, error) {
		return st.(driver.StmtQueryContext).QueryContext(ctx, args)
	})
}

// withStmt calls run with query's kept statement, and once more with a
// new one if the server says the kept one is stale.
func withStmt[T any](ctx context.Context, c *stmtConn, query string, run func(driver.Stmt) (T, error)) (T, error) {
	for try := 0; ; try++ {
		st, err := c.stmt(ctx, query)
		if err != nil {
			var zero T
			return zero, err
		}
		v, err := run(st)
		if try == 0 && c.stale(query, err) {
			continue
		}
		return v, err
	}
}

// stmt returns the kept statement for query, preparing it if need be.
// When the server holds as many prepared statements as it allows, this
// connection's are closed and the call goes the driver's way
// (driver.ErrSkip: database/sql prepares, runs and closes a statement).
func (c *stmtConn) stmt(ctx context.Context, query string) (driver.Stmt, error) {
	if st, ok := c.stmts[query]; ok {
		return st, nil
	}
	st, err := c.Preparer.PrepareContext(ctx, query)
	if err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == errMaxPreparedStmts {
			c.drop()
			return nil, driver.ErrSkip
		}
		return nil, err
	}
	if len(c.order) >= maxCachedStmts {
		oldest := c.order[0]
		c.order = c.order[1:]
		_ = c.stmts[oldest].Close()
		delete(c.stmts, oldest)
	}
	c.stmts[query] = st
	c.order = append(c.order, query)
	return st, nil
}

// stale reports whether err says query's kept statement must be prepared
// again (a table changed under it, or the server lost it); it is dropped
// then, and the caller tries once more.
func (c *stmtConn) stale(query string, err error) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != errNeedReprepare && me.Number != errUnknownStmtHandle {
		return false
	}
	if st, ok := c.stmts[query]; ok {
		_ = st.Close()
		delete(c.stmts, query)
		for i, q := range c.order {
			if q == query {
				c.order = append(c.order[:i], c.order[i+1:]...)
				break
			}
		}
	}
	return true
}

// drop closes every kept statement.
func (c *stmtConn) drop() {
	for _, st := range c.stmts {
		_ = st.Close()
	}
	clear(c.stmts)
	c.order = c.order[:0]
}
