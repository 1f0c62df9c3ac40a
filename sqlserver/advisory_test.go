package sqlserver_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlserver"
	"github.com/sqlease/sqlease/sqlstore"
	"github.com/sqlease/sqlease/storetest"
)

// These tests run advisory mode on a real server, when SQLEASE_TEST_SQLSERVER_DSN
// names one (see databaseDSN); without it they skip, and only the static
// and scripted tests (advisory_internal_test.go, advisory_session_test.go)
// run. The DSN's login must be allowed to KILL sessions (ALTER ANY
// CONNECTION, e.g. sa) for the crash tests.

// TestAdvisory runs the advisory-mode scenarios every dialect shares
// (storetest.Advisory) on sp_getapplock sessions.
func TestAdvisory(t *testing.T) {
	const unchecked = "not yet run against a SQL Server: none can be had here (ENVIRONMENT.md); enable it with one"
	storetest.Advisory(t, storetest.AdvisoryDialect{
		New: newAdvisoryStore,
		Kill: func(t *testing.T, s *sqlstore.Store, _, _ string, l sqlease.SessionLock) {
			t.Helper()
			spid, err := sqlserver.SessionID(l)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.DB().ExecContext(t.Context(), "KILL "+strconv.FormatInt(spid, 10)); err != nil {
				t.Fatalf("KILL %d (needs ALTER ANY CONNECTION): %v", spid, err)
			}
		},
		Slack:      time.Second,
		LockReturn: 1500 * time.Millisecond,
		Handoff:    5 * time.Second,
		Skip: map[string]string{
			"LockExcludesUntilClose": unchecked, "RenewStaleToken": unchecked, "FrozenHolder": unchecked,
			"TakeoverWaitsForPriorTerm": unchecked, "TakeoverSparesLocklessTerm": unchecked,
			"LocklessTermTakesLock": unchecked, "MigrateAddsLeaseLocked": unchecked,
		},
	})
}

// newAdvisoryStore opens a store under a fresh random prefix, and a locker
// on the same tables.
var newAdvisoryStore = database.Advisory(func(dsn, prefix string) (sqlease.SessionLocker, error) {
	return sqlserver.NewLocker(sqlserver.AdvisoryConfig{DSN: dsn, Prefix: prefix})
})

// A session whose lock was released behind its back — the connection
// still alive — is refused at its next renew with ErrSessionLost, leaves
// the row untouched, and its check closes Lost.
func TestAdvisoryRenewAfterLostLock(t *testing.T) {
	s, locker, _ := newAdvisoryStore(t)
	ctx := t.Context()
	a := storetest.LockedSession(t, locker, "adv")
	lease, err := a.Takeover(ctx, "adv", "holder-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	if err := sqlserver.ReleaseBehindItsBack(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Renew(ctx, lease.Token(), time.Minute); !errors.Is(err, sqlease.ErrSessionLost) {
		t.Fatalf("renew after the session lost its lock: want ErrSessionLost, got %v", err)
	}
	select {
	case <-a.Lost():
		t.Logf("Lost closed %s after the release", time.Since(released))
	case <-time.After(time.Second):
		t.Fatal("Lost not closed within a second of losing the lock")
	}
	got, err := s.Lease(ctx, "adv")
	if err != nil || !got.RenewedAt.Equal(lease.RenewedAt) || got.Epoch != lease.Epoch {
		t.Fatalf("lease after the refused renew: %+v %v, want %+v", got, err, lease)
	}
}
