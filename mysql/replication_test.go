package mysql_test

import (
	"testing"

	"github.com/sqlease/sqlease/mysql"
	"github.com/sqlease/sqlease/storetest"
)

// The test server (scripts/test.sh: --skip-log-bin) has no replica: single,
// read as the unprivileged user the tests connect as.
func TestReadReplicationSingle(t *testing.T) {
	storetest.ReplicationSingle(t, newStore(t).DB(), mysql.ReadReplication)
}
