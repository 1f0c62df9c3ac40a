package storetest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/sqlease/sqlease"
)

// ReplicationSingle checks that read, a dialect's ReadReplication, finds
// no replica on db: the test servers have none, so anything but single is
// a misreading. It returns what it read, for the dialect's own checks.
func ReplicationSingle(t *testing.T, db *sql.DB, read func(context.Context, *sql.DB) (sqlease.Durability, error)) sqlease.Durability {
	t.Helper()
	d, err := read(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s (%s)", d, d.Detail)
	if d.Mode != sqlease.DurabilitySingle {
		t.Fatalf("got %s (%s), want single", d, d.Detail)
	}
	return d
}
