package postgres_test

import (
	"testing"
	"time"

	"github.com/sqlease/sqlease/storetest"
)

func TestAdvisoryFrozenHolderReplaced(t *testing.T) {
	s, prefix := newStoreWithPrefix(t)
	storetest.AdvisoryFrozenHolder(t, s, newLocker(t, prefix))
}

func TestAdvisoryTakeoverWaitsForPriorTerm(t *testing.T) {
	s, prefix := newStoreWithPrefix(t)
	storetest.AdvisoryTakeoverWaitsForPriorTerm(t, s, newLocker(t, prefix))
}

func TestAdvisoryTakeoverSparesLocklessTerm(t *testing.T) {
	s, prefix := newStoreWithPrefix(t)
	storetest.AdvisoryTakeoverSparesLocklessTerm(t, s, newLocker(t, prefix))
}

// A leases table from before lease_locked gains the column on Migrate,
// with existing rows marked as not taken through the lock, and a second
// Migrate leaves it alone.
func TestMigrateAddsLeaseLocked(t *testing.T) {
	s, prefix := newStoreWithPrefix(t)
	ctx := t.Context()
	if _, err := s.DB().ExecContext(ctx, "ALTER TABLE "+prefix+"_leases DROP COLUMN lease_locked"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "old", "h", time.Minute); err == nil {
		t.Fatal("Acquire worked on a table without lease_locked: the test does not test the upgrade")
	}
	for range 2 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	if _, err := s.Acquire(ctx, "old", "h", time.Minute); err != nil {
		t.Fatalf("Acquire after Migrate: %v", err)
	}
	var locked bool
	if err := s.DB().QueryRowContext(ctx, "SELECT lease_locked FROM "+prefix+"_leases WHERE lease_name = 'old'").Scan(&locked); err != nil || locked {
		t.Fatalf("lease_locked of a lease acquired through the store: %v, %v", locked, err)
	}
}
