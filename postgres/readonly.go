package postgres

import (
	"context"
	"database/sql/driver"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// A node follows a failover by itself (issue 31 item 4): with a multi-host
// connection string and target_session_attrs=read-write, every new
// connection goes to the server that accepts writes — but pooled
// connections to a server that turned read-only (a demoted primary, a
// replica promoted elsewhere while the old one lives) would keep failing
// every write with SQLSTATE 25006. Classify counts each such refusal; a
// connection made before the latest one is discarded at its next reuse
// (database/sql then opens a new one, to the new primary).

// readOnlyRefusals counts the statements refused because their server is
// read-only, in this process.
var readOnlyRefusals atomic.Uint64

// genKey is where a connection keeps the count it was made under.
const genKey = "sqlease.read_only_refusals"

// readOnlyRefused records a refusal (Classify calls it on 25006).
func readOnlyRefused() { readOnlyRefusals.Add(1) }

// stampConn is the pool's after-connect hook: the connection remembers
// the refusals counted before it was made.
func stampConn(_ context.Context, c *pgx.Conn) error {
	c.PgConn().CustomData()[genKey] = readOnlyRefusals.Load()
	return nil
}

// resetConn is the pool's reuse hook: a connection made before the latest
// read-only refusal may be on the server that refused it; it is discarded.
func resetConn(_ context.Context, c *pgx.Conn) error {
	if g, ok := c.PgConn().CustomData()[genKey].(uint64); ok && g < readOnlyRefusals.Load() {
		return driver.ErrBadConn
	}
	return nil
}
