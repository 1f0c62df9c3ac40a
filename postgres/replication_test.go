package postgres_test

import (
	"testing"

	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/storetest"
)

// The test server has no standby: single, as the serving pool sees it.
// (internal/hafailover reads a Patroni cluster in both modes.)
func TestReadReplicationSingle(t *testing.T) {
	d := storetest.ReplicationSingle(t, newStore(t).DB(), postgres.ReadReplication)
	if d.String() != "durability=single standbys=0 sync_standbys=0" {
		t.Fatalf("got %s (%s), want single with no standbys", d, d.Detail)
	}
}
