package postgres_test

import (
	"testing"

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

func TestMigrateAddsLeaseLocked(t *testing.T) {
	s, prefix := newStoreWithPrefix(t)
	storetest.MigrateAddsLeaseLocked(t, s, prefix)
}
