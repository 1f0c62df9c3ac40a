package sqlease

import (
	"context"
	"errors"
	"time"
)

// ErrSessionLost is returned by SessionLock methods when the database session
// that held the lock has ended or no longer holds it — also what a connection
// pooler in transaction mode looks like, since it hands each statement to
// another session.
var ErrSessionLost = errors.New("sqlease: session lock lost")

// SessionLock is the lock of advisory mode (SPEC §3): a lock the database
// ties to one session on a dedicated, never pooled connection —
// PostgreSQL pg_advisory_lock, SQL Server sp_getapplock with a session owner,
// MySQL GET_LOCK. The database frees it as soon as it sees the session die,
// so a follower blocked in Lock takes over within about one round trip of a
// leader crash instead of waiting for the lease to expire.
//
// The lock decides only who may take the lease row over early. The row keeps
// the epoch, expiry and heartbeat: Takeover bumps the epoch, so every fenced
// write of the previous holder fails (G2) however its process is doing.
type SessionLock interface {
	// Lock blocks until this session holds the lock or ctx ends.
	Lock(ctx context.Context) error
	// Takeover makes this session's holder the lease's holder with epoch + 1
	// (1 on insert) and expires_at = now + ttl, and marks the term as taken
	// through the lock. It takes over an unexpired lease only if that term
	// was marked so too: winning the lock says that the lock's previous
	// holder's session has ended, not that a term acquired without the lock
	// (while a frozen session kept it) has. Such a term it leaves to
	// expire, returning ErrLeaseHeld. It is correct only while the lock is
	// held.
	Takeover(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error)
	// Renew is LeaseStore.Renew made on the locked session, verifying in the
	// same round trip that the session still holds the lock, and marking
	// the term as held through the lock. It returns ErrLeaseLost or
	// ErrSessionLost.
	Renew(ctx context.Context, tok Token, ttl time.Duration) (Lease, error)
	// Lost is closed as soon as the client sees the session end, at the
	// latest from a successful Takeover on: the connection is watched by a
	// blocked read where the driver allows, else by a frequent check.
	Lost() <-chan struct{}
	// Close releases the lock, if held, and ends the session.
	Close(ctx context.Context) error
}

// SessionLocker opens a new session for a SessionLock on lease name; the
// elector opens a fresh one for every attempt to lead.
type SessionLocker func(ctx context.Context, name string) (SessionLock, error)
