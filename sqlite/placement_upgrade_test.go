package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sqlease/sqlease/sqlite"
	"github.com/sqlease/sqlease/sqlstore"
)

// TestUpgradeAddsPlacementColumns: a singletons table of a version before
// placement by node (no node_id, node_epoch, generation) gets the columns
// from Migrate, keeps its rows, and the first placement raises a singleton's
// generation above the epoch its old lease had given its last run.
func TestUpgradeAddsPlacementColumns(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	st, err := sqlite.OpenStore(ctx, path, "sqlease")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"node_id", "node_epoch", "generation"} {
		if _, err := st.DB().ExecContext(ctx, `ALTER TABLE sqlease_singletons DROP COLUMN `+c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.DB().ExecContext(ctx, `INSERT INTO sqlease_singletons (name, state, holder_id, lease_epoch, created_at)
VALUES ('old', '{"n":7}', 'gone', 41, '2000-01-01 00:00:00.000')`); err != nil {
		t.Fatal(err)
	}
	st.DB().Close()

	st, err = sqlite.OpenStore(ctx, path, "sqlease")
	if err != nil {
		t.Fatalf("open an old file: %v", err)
	}
	defer st.DB().Close()
	r, err := st.Singleton(ctx, "old")
	if err != nil || string(r.State) != `{"n":7}` || r.Node != "" || r.Generation != 0 {
		t.Fatalf("the old row after Migrate: %+v, %v", r, err)
	}
	l, err := st.Acquire(ctx, sqlstore.MemberLeasePrefix+"me", "me", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := st.PlaceSingletons(ctx, l.Token(), []string{"old"}, 10); err != nil || n != 1 {
		t.Fatalf("place: %d, %v", n, err)
	}
	if r, _ := st.Singleton(ctx, "old"); r.Generation != 42 || r.Node != "me" || r.NodeEpoch != l.Epoch {
		t.Fatalf("after the first placement: %+v, want generation 42 on me", r)
	}
}
