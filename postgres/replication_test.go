package postgres_test

import (
	"context"
	"testing"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/postgres"
)

// The test server has no standby: single, as the serving pool sees it.
// (internal/hafailover reads a Patroni cluster in both modes.)
func TestReadReplicationSingle(t *testing.T) {
	db, err := postgres.Open(databaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := postgres.ReadReplication(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s (%s)", d, d.Detail)
	if d.Mode != sqlease.DurabilitySingle || d.String() != "durability=single standbys=0 sync_standbys=0" {
		t.Fatalf("got %s (%s), want single", d, d.Detail)
	}
}
