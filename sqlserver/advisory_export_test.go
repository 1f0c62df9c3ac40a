package sqlserver

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqlease/sqlease"
)

// Hooks for advisory_test.go, which runs in package sqlserver_test.

// SessionID returns the server session id (@@SPID) of an advisory session.
func SessionID(l sqlease.SessionLock) (int64, error) {
	s, ok := l.(*session)
	if !ok {
		return 0, fmt.Errorf("%T is not an advisory session", l)
	}
	return s.spid, nil
}

// ReleaseBehindItsBack releases the session's application lock on the
// session's own connection, leaving the session otherwise as it was: what
// a connection pooler that resets sessions would do.
func ReleaseBehindItsBack(ctx context.Context, l sqlease.SessionLock) error {
	s, ok := l.(*session)
	if !ok {
		return fmt.Errorf("%T is not an advisory session", l)
	}
	return s.exec(ctx, func(ctx context.Context, c *sql.Conn) error {
		_, err := c.ExecContext(ctx, `EXEC sp_releaseapplock @Resource = @p1, @LockOwner = 'Session'`, s.resource)
		return err
	})
}
