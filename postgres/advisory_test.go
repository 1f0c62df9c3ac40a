package postgres_test

import (
	"testing"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/sqlstore"
	"github.com/sqlease/sqlease/storetest"
)

func TestLockKeyStable(t *testing.T) {
	a, b := postgres.LockKey("sqlease:sqlease:leader"), postgres.LockKey("sqlease:sqlease:leader")
	if a != b || a == postgres.LockKey("sqlease:other:leader") {
		t.Fatal("lock keys must be stable and differ by scope")
	}
}

// TestAdvisory runs the advisory-mode scenarios every dialect shares
// (storetest.Advisory) on pg_advisory_lock sessions.
func TestAdvisory(t *testing.T) {
	storetest.Advisory(t, storetest.AdvisoryDialect{
		New:        database.Advisory(newLocker),
		KillHolder: killHolder,
	})
}

// newLocker makes the pg_advisory_lock session locker of the tables under
// prefix.
func newLocker(url, prefix string) (sqlease.SessionLocker, error) {
	return postgres.NewLocker(postgres.AdvisoryConfig{DSN: url, Prefix: prefix})
}

// killHolder ends the backend that holds the advisory lock of lease, from
// another session (pg_terminate_backend), as a crash of its client would.
func killHolder(t *testing.T, s *sqlstore.Store, prefix, lease string) {
	t.Helper()
	var pid int
	key := postgres.LockKey(postgres.DefaultLockScope(prefix, lease))
	if err := s.DB().QueryRowContext(t.Context(), `SELECT pid FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = $1`, key).Scan(&pid); err != nil {
		t.Fatalf("find the holder of the lock of %s: %v", lease, err)
	}
	if _, err := s.DB().ExecContext(t.Context(), `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
}
