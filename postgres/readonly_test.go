package postgres_test

import (
	"errors"
	"testing"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/postgres"
)

// A pooled connection to a server that turned read-only (a demoted primary)
// is replaced after the first write it refuses, instead of refusing every
// write it is handed (issue 31 item 4). The read-only server is played by
// a session set read-only, which is what the server's refusal looks like to
// the pool.
func TestReadOnlyConnectionReplaced(t *testing.T) {
	db, err := postgres.Open(databaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // the pool has one connection to hand out
	ctx := t.Context()
	t.Cleanup(func() { _, _ = db.Exec(`DROP TABLE IF EXISTS ro_probe`) })
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `SET SESSION default_transaction_read_only = on`); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	write := func() error {
		_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS ro_probe (n int)`)
		return postgres.Classify(err)
	}
	err = write()
	if err == nil {
		t.Fatal("the read-only session accepted a write: the test plays nothing")
	}
	if !errors.Is(err, sqlease.ErrTransient) {
		t.Errorf("a write refused by a read-only server is not transient: %v", err)
	}
	for i := range 3 {
		if err := write(); err != nil {
			t.Fatalf("write %d after the refusal: %v (the pool kept the read-only connection)", i+2, err)
		}
	}
}
