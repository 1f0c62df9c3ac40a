package ledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/ledger"
	"github.com/sqlease/sqlease/internal/pgtest"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/sqlite"
)

// row is a hand-made ledger row: holder, epoch and a database time in
// milliseconds after a fixed base.
type row struct {
	holder string
	epoch  int64
	ms     int
}

var base = time.Date(2026, 2, 2, 12, 0, 0, 0, time.UTC)

func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := ledger.Migrate(context.Background(), db, "sqlite"); err != nil {
		t.Fatal(err)
	}
	return db
}

// insert writes rows in order with explicit database times, bypassing
// Append, to build ledgers no correct system would produce.
func insert(t *testing.T, db *sql.DB, rows []row) {
	t.Helper()
	for i, r := range rows {
		ts := base.Add(time.Duration(r.ms) * time.Millisecond).Format("2006-01-02 15:04:05.000")
		if _, err := db.Exec(`INSERT INTO `+ledger.Table+` (holder, epoch, db_time, note) VALUES (?, ?, ?, ?)`,
			r.holder, r.epoch, ts, fmt.Sprintf("n%d", i)); err != nil {
			t.Fatal(err)
		}
	}
}

func setLease(t *testing.T, db *sql.DB, holder string, epoch int64) {
	t.Helper()
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS t_leases (lease_name TEXT PRIMARY KEY, holder_id TEXT NOT NULL, lease_epoch INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO t_leases VALUES ('l', ?, ?)`, holder, epoch); err != nil {
		t.Fatal(err)
	}
}

func TestCheckGoodLedgers(t *testing.T) {
	cases := map[string][]row{
		"empty":  nil,
		"single": {{"a", 1, 0}},
		"one holder per epoch, epochs increasing": {
			{"a", 1, 0}, {"a", 1, 10}, {"a", 1, 20},
			{"b", 2, 1500}, {"b", 2, 1520},
			{"a", 3, 3000}, // the same holder may come back with a new epoch
			{"c", 7, 5000}, // epochs may skip (acquired but never acted)
		},
		"same database time at an epoch boundary": {
			{"a", 1, 100}, {"b", 2, 100},
		},
	}
	for name, rows := range cases {
		t.Run(name, func(t *testing.T) {
			db := openSQLite(t)
			insert(t, db, rows)
			if err := ledger.Check(context.Background(), db, "sqlite", ""); err != nil {
				t.Fatalf("Check failed on a good ledger: %v", err)
			}
		})
	}
}

func TestCheckBadLedgers(t *testing.T) {
	cases := []struct {
		name  string
		rows  []row
		lease *ledger.LeaseRow // nil: no leases table
		want  []string         // kinds that must be reported
	}{
		{
			name: "two holders in one epoch",
			rows: []row{{"a", 1, 0}, {"b", 1, 10}},
			want: []string{ledger.KindTwoHolders},
		},
		{
			name: "two holders in one epoch, not adjacent",
			rows: []row{{"a", 1, 0}, {"a", 2, 1000}, {"b", 2, 1010}, {"a", 2, 1020}},
			want: []string{ledger.KindTwoHolders},
		},
		{
			name: "epoch goes backwards",
			rows: []row{{"a", 1, 0}, {"b", 2, 1000}, {"a", 1, 2000}},
			want: []string{ledger.KindEpochBackwards, ledger.KindWriteAfterNewerEpoch},
		},
		{
			name: "stale write in the same millisecond as the newer epoch",
			// equal database times order nothing (see the good ledger "same
			// database time at an epoch boundary"): only the id order sees it
			rows: []row{{"a", 1, 0}, {"b", 2, 1000}, {"a", 1, 1000}},
			want: []string{ledger.KindEpochBackwards},
		},
		{
			name: "stale epoch interleaved",
			// the stale write of epoch 1 follows another epoch-1 write that
			// itself followed epoch 2: adjacent epochs do not go down, yet
			// epoch 2 had already written
			rows: []row{{"a", 1, 0}, {"b", 2, 1000}, {"a", 1, 1001}, {"a", 1, 1002}},
			want: []string{ledger.KindEpochBackwards, ledger.KindStaleEpoch},
		},
		{
			name: "stale write committed in id order but later in database time",
			// ids are in epoch order (as when ids are handed out at insert
			// time and the stale transaction took its id early), but the
			// epoch-1 row was written after epoch 2 began
			rows: []row{{"a", 1, 0}, {"a", 1, 1600}, {"b", 2, 1500}, {"b", 2, 1700}},
			want: []string{ledger.KindWriteAfterNewerEpoch},
		},
		{
			name: "stale write after a much newer epoch",
			rows: []row{{"a", 1, 0}, {"b", 2, 1000}, {"c", 3, 2000}, {"b", 2, 3000}},
			want: []string{ledger.KindEpochBackwards, ledger.KindWriteAfterNewerEpoch},
		},
		{
			name: "non-positive epoch",
			rows: []row{{"a", 0, 0}},
			want: []string{ledger.KindBadRow},
		},
		{
			name:  "epoch beyond the lease",
			rows:  []row{{"a", 1, 0}, {"b", 2, 1000}},
			lease: &ledger.LeaseRow{Name: "l", Holder: "a", Epoch: 1},
			want:  []string{ledger.KindUnknownEpoch},
		},
		{
			name:  "current epoch under another holder than the lease row",
			rows:  []row{{"a", 1, 0}, {"b", 2, 1000}},
			lease: &ledger.LeaseRow{Name: "l", Holder: "c", Epoch: 2},
			want:  []string{ledger.KindHolderMismatch},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := openSQLite(t)
			insert(t, db, tc.rows)
			table := ""
			if tc.lease != nil {
				setLease(t, db, tc.lease.Holder, tc.lease.Epoch)
				table = "t_leases"
			}
			err := ledger.Check(context.Background(), db, "sqlite", table)
			if err == nil {
				t.Fatalf("Check passed a bad ledger; want %v", tc.want)
			}
			le, ok := ledger.AsError(err)
			if !ok {
				t.Fatalf("Check returned %T (%v), want *ledger.Error", err, err)
			}
			for _, k := range tc.want {
				if !le.Has(k) {
					t.Errorf("violation %s not reported; got %v:\n%v", k, le.Kinds(), err)
				}
			}
			// The message must name the offending rows.
			if !strings.Contains(err.Error(), "#") {
				t.Errorf("error does not list rows: %v", err)
			}
			t.Logf("%v", err)
		})
	}
}

func TestCheckLeaseAgrees(t *testing.T) {
	db := openSQLite(t)
	insert(t, db, []row{{"a", 1, 0}, {"b", 2, 1000}})
	setLease(t, db, "b", 3) // epoch 3 acquired but has not acted yet
	if err := ledger.Check(context.Background(), db, "sqlite", "t_leases"); err != nil {
		t.Fatal(err)
	}
	if err := ledger.Check(context.Background(), db, "sqlite", "t_leases; DROP TABLE x"); err == nil {
		t.Fatal("Check accepted a table name that is not an identifier")
	}
}

func TestVerifyUnsortedInput(t *testing.T) {
	rows := []ledger.Row{
		{ID: 2, Holder: "b", Epoch: 2, DBTime: base.Add(time.Second)},
		{ID: 1, Holder: "a", Epoch: 1, DBTime: base},
	}
	if v := ledger.Verify(rows, nil); len(v) != 0 {
		t.Fatalf("Verify on a good ledger given out of order: %v", v)
	}
}

func TestUnknownDialect(t *testing.T) {
	if err := ledger.Migrate(context.Background(), nil, "oracle"); err == nil {
		t.Fatal("Migrate accepted an unknown dialect")
	}
}

// testAppend writes through Append in transactions, as the fenced workers do,
// and checks the round trip on a real database.
func testAppend(t *testing.T, db *sql.DB, dialect string) {
	ctx := context.Background()
	if err := ledger.Migrate(ctx, db, dialect); err != nil {
		t.Fatal(err)
	}
	if err := ledger.Migrate(ctx, db, dialect); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	write := func(holder string, epoch int64, note string) {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ledger.Append(ctx, tx, dialect, holder, epoch, note); err != nil {
			tx.Rollback()
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now().Add(-time.Minute)
	write("a", 1, "first")
	write("a", 1, "second")
	time.Sleep(5 * time.Millisecond)
	write("b", 2, "third")
	rows, err := ledger.Rows(ctx, db, dialect)
	if err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, r := range rows {
		notes = append(notes, r.Note)
		if r.DBTime.Before(before) || r.DBTime.After(time.Now().Add(time.Minute)) {
			t.Errorf("row %v: database time far from now", r)
		}
	}
	if !slices.Equal(notes, []string{"first", "second", "third"}) {
		t.Fatalf("rows = %v", rows)
	}
	if err := ledger.Check(ctx, db, dialect, ""); err != nil {
		t.Fatal(err)
	}
	// The stale append must land at a later database time than "third",
	// or the time-order check cannot see it: SQLite's clock has millisecond
	// resolution, and two appends a few hundred microseconds apart (without
	// -race) carry the same time. Wait until the database clock has passed
	// third's millisecond.
	third := rows[len(rows)-1]
	waitDBClockPast(t, db, dialect, third.DBTime)
	write("a", 1, "stale")
	err = ledger.Check(ctx, db, dialect, "")
	if le, ok := ledger.AsError(err); !ok || !le.Has(ledger.KindEpochBackwards) || !le.Has(ledger.KindWriteAfterNewerEpoch) {
		t.Fatalf("Check after a stale append = %v", err)
	}
}

// waitDBClockPast waits until the database clock reads a later millisecond
// than t0.
func waitDBClockPast(t *testing.T, db *sql.DB, dialect string, t0 time.Time) {
	t.Helper()
	q := map[string]string{
		"sqlite":   `SELECT CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER)`,
		"postgres": `SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`,
	}[dialect]
	deadline := time.Now().Add(5 * time.Second)
	for {
		var ms int64
		if err := db.QueryRow(q).Scan(&ms); err != nil {
			t.Fatal(err)
		}
		if ms > t0.UnixMilli() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("database clock (%d ms) not past %s after 5s", ms, t0.Format(time.RFC3339Nano))
		}
		time.Sleep(time.Millisecond)
	}
}

func TestAppendSQLite(t *testing.T) {
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	testAppend(t, db, "sqlite")
}

func TestAppendPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server")
	}
	srv := pgtest.Start(t)
	db, err := postgres.Open(pgtest.CreateDatabase(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	testAppend(t, db, "postgres")
}
