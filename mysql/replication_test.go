package mysql_test

import (
	"context"
	"testing"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/mysql"
)

// The test server (scripts/test.sh: --skip-log-bin) has no replica: single,
// read as the unprivileged user the tests connect as.
func TestReadReplicationSingle(t *testing.T) {
	db, err := mysql.Open(databaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := mysql.ReadReplication(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s (%s)", d, d.Detail)
	if d.Mode != sqlease.DurabilitySingle {
		t.Fatalf("got %s (%s), want single", d, d.Detail)
	}
}
