package sqlite_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlite"
	"github.com/sqlease/sqlease/sqlstore"
)

// TestUpgradeAddsReclaimedColumn: a jobs table of a version before the
// batch statements (no lock_reclaimed) gets the column from Migrate, also
// when several processes open the file at once (SQLite has no migration
// lock: the one that adds it second must not fail), and the batch claim
// works on it and tells a fresh claim from a reclaim.
func TestUpgradeAddsReclaimedColumn(t *testing.T) {
	ctx := context.Background()
	path := oldFile(t, `ALTER TABLE sqlease_jobs DROP COLUMN lock_reclaimed`)

	var wg sync.WaitGroup
	stores := make([]*sqlstore.Store, 4)
	errs := make([]error, len(stores))
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = sqlite.OpenStore(ctx, path, "sqlease") })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d of an old file at once: %v", i, err)
		}
		defer stores[i].DB().Close()
	}
	st := stores[0]
	if _, err := st.DB().ExecContext(ctx, `INSERT INTO sqlease_jobs (name, spec_hash, schedule, action, missed_runs, max_attempts,
	backoff_ms, lock_timeout_ms, next_run_at, created_at, last_modified_at, locked_by, locked_at, lock_epoch)
VALUES ('fresh', 'h', '{}', '', 'run_once', 3, 1000, 60000, '2000-01-01 00:00:00.000', '2000-01-01 00:00:00.000', '2000-01-01 00:00:00.000', NULL, NULL, 0),
       ('stale', 'h', '{}', '', 'run_once', 3, 1000, 1, '2000-01-01 00:00:00.000', '2000-01-01 00:00:00.000', '2000-01-01 00:00:00.000', 'gone', '2000-01-01 00:00:00.000', 1)`); err != nil {
		t.Fatal(err)
	}
	if !st.Batched() {
		t.Fatal("the SQLite store does not batch")
	}
	tok := sqlease.Token{Name: "leader", Holder: "me", Epoch: 1}
	var ids []int64
	rows, err := st.DB().QueryContext(ctx, `SELECT id FROM sqlease_jobs ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	claimed, err := st.ClaimJobs(ctx, tx, ids, tok)
	if err != nil || len(claimed) != 2 {
		t.Fatalf("ClaimJobs on the upgraded table: %d claimed, %v", len(claimed), err)
	}
	for _, c := range claimed {
		if want := c.Name == "stale"; c.Reclaimed != want {
			t.Errorf("%s: Reclaimed = %v, want %v", c.Name, c.Reclaimed, want)
		}
	}
}

// TestUpgradeAddsPlacementColumns: a singletons table of a version before
// placement by node (no node_id, node_epoch, generation) gets the columns
// from Migrate, keeps its rows, and the first placement raises a singleton's
// generation above the epoch its old lease had given its last run.
func TestUpgradeAddsPlacementColumns(t *testing.T) {
	ctx := context.Background()
	path := oldFile(t,
		`ALTER TABLE sqlease_singletons DROP COLUMN node_id`,
		`ALTER TABLE sqlease_singletons DROP COLUMN node_epoch`,
		`ALTER TABLE sqlease_singletons DROP COLUMN generation`,
		`INSERT INTO sqlease_singletons (name, state, holder_id, lease_epoch, created_at)
VALUES ('old', '{"n":7}', 'gone', 41, '2000-01-01 00:00:00.000')`)
	st := openFile(t, path)
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
