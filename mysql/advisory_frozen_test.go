package mysql_test

import (
	"testing"

	"github.com/sqlease/sqlease/storetest"
)

func TestAdvisoryFrozenHolderReplaced(t *testing.T) {
	s, prefix := newAdvisoryStore(t)
	storetest.AdvisoryFrozenHolder(t, s, newLocker(t, prefix))
}

func TestAdvisoryTakeoverWaitsForPriorTerm(t *testing.T) {
	s, prefix := newAdvisoryStore(t)
	storetest.AdvisoryTakeoverWaitsForPriorTerm(t, s, newLocker(t, prefix))
}
