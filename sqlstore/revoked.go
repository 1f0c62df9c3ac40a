package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/sqlease/sqlease"
)

// RevokedQueries are the statements of the revoked dashboard sessions,
// {prefix}_revoked_sessions: one row per session signed out before its
// expiry, kept until then. The dashboard's sessions are signed cookies
// every node of the fleet accepts; a sign-out records the session's id
// here so that every node refuses the cookie from then on, also a copy of
// it. A dialect without them (all fields empty) cannot revoke.
type RevokedQueries struct {
	// Migrations create the table and its index, idempotently.
	Migrations []string
	// Insert: (id, ttl_ms). Records id as revoked until now + ttl_ms; an
	// id already recorded is left as it is.
	Insert string
	// Check: (id). Returns one row while id is recorded and unexpired, none
	// otherwise (a lookup by primary key).
	Check string
	// Prune: (). Deletes the rows whose expiry has passed; rows affected.
	Prune string
}

// MaxSessionID bounds a revoked session's id (bytes).
const MaxSessionID = 64

func (s *Store) rq() *RevokedQueries { return &s.d.Revoked }

// RevokeSession records the dashboard session id as revoked for ttl (the
// rest of its lifetime): SessionRevoked reports it on every node until
// then. Revoking an id twice is no error. It returns an error wrapping
// sqlease.ErrInvalidConfig for an empty or too long id, a ttl under a
// millisecond, or a dialect that cannot revoke.
func (s *Store) RevokeSession(ctx context.Context, id string, ttl time.Duration) error {
	if s.rq().Insert == "" {
		return fmt.Errorf("revoke session: %w: the %s dialect cannot revoke sessions", sqlease.ErrInvalidConfig, s.d.Name)
	}
	if id == "" || len(id) > MaxSessionID || ttl < time.Millisecond {
		return fmt.Errorf("revoke session: %w: id of %d bytes (1 to %d), ttl %s (at least 1ms)", sqlease.ErrInvalidConfig, len(id), MaxSessionID, ttl)
	}
	if _, err := s.db.ExecContext(ctx, s.rq().Insert, id, ttl.Milliseconds()); err != nil {
		if s.d.IsUniqueViolation != nil && s.d.IsUniqueViolation(err) {
			return nil // revoked by a concurrent sign-out of the same session
		}
		return fmt.Errorf("revoke session: %w", s.classify(err))
	}
	return nil
}

// SessionRevoked reports whether the session id is revoked and its
// revocation unexpired, in one lookup by primary key. A dialect that cannot
// revoke reports false.
func (s *Store) SessionRevoked(ctx context.Context, id string) (bool, error) {
	if s.rq().Check == "" || id == "" || len(id) > MaxSessionID {
		return false, nil
	}
	rows, err := s.db.QueryContext(ctx, s.rq().Check, id)
	if err != nil {
		return false, fmt.Errorf("check session: %w", s.classify(err))
	}
	defer rows.Close()
	found := rows.Next()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("check session: %w", s.classify(err))
	}
	return found, nil
}

// PruneRevokedSessions deletes the revocations whose session has expired
// anyway and reports how many.
func (s *Store) PruneRevokedSessions(ctx context.Context) (int64, error) {
	if s.rq().Prune == "" {
		return 0, nil
	}
	res, err := s.db.ExecContext(ctx, s.rq().Prune)
	if err != nil {
		return 0, fmt.Errorf("prune revoked sessions: %w", s.classify(err))
	}
	return res.RowsAffected()
}
