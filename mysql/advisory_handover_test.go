package mysql_test

import (
	"testing"

	"github.com/sqlease/sqlease/storetest"
)

func TestAdvisoryLocklessTermTakesLock(t *testing.T) {
	s, prefix := newAdvisoryStore(t)
	storetest.AdvisoryLocklessTermTakesLock(t, s, newLocker(t, prefix))
}
