package storetest

import (
	"context"
	"database/sql"
	"strings"
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

// Verdict is what a dialect's reading of its replication (its
// ReadReplication) should make of one state of the server.
type Verdict struct {
	Name        string
	Got         sqlease.Durability // the dialect's verdict on the state
	Mode        sqlease.DurabilityMode
	Sync, Async int
	Detail      string // a part of Got.Detail
}

// Verdicts checks each verdict, one subtest each.
func Verdicts(t *testing.T, vs []Verdict) {
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			d := v.Got
			if d.Mode != v.Mode || d.Sync != v.Sync || d.Async != v.Async || !strings.Contains(d.Detail, v.Detail) {
				t.Errorf("%+v; want mode %s sync %d async %d, detail with %q", d, v.Mode, v.Sync, v.Async, v.Detail)
			}
		})
	}
}
