package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/sqlease/sqlease/mysql"
)

// sessionStatus reads one counter of conn's session.
func sessionStatus(t *testing.T, conn *sql.Conn, name string) int {
	t.Helper()
	var n string
	var v int
	if err := conn.QueryRowContext(t.Context(), `SHOW SESSION STATUS LIKE '`+name+`'`).Scan(&n, &v); err != nil {
		t.Fatalf("SHOW SESSION STATUS LIKE %q: %v", name, err)
	}
	return v
}

// pinnedConn opens a pool with Open and pins one connection of it.
func pinnedConn(t *testing.T) (*sql.DB, *sql.Conn) {
	t.Helper()
	db, err := mysql.Open(databaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return db, conn
}

// A connection of Open's pool prepares a statement with arguments once and
// runs it from then on; the driver alone would prepare and close it on
// every call (interpolateParams=false). Results are the statement's, also
// for statements that return rows.
func TestStatementsPreparedOncePerConnection(t *testing.T) {
	_, conn := pinnedConn(t)
	ctx := t.Context()
	prepared := sessionStatus(t, conn, "Com_stmt_prepare")
	closed := sessionStatus(t, conn, "Com_stmt_close")
	for i := range 20 {
		var got int
		if err := conn.QueryRowContext(ctx, `SELECT ? + 1`, i).Scan(&got); err != nil || got != i+1 {
			t.Fatalf("SELECT %d + 1 = %d, %v", i, got, err)
		}
		if _, err := conn.ExecContext(ctx, `SET @sqlease_test_v = ?`, i); err != nil {
			t.Fatal(err)
		}
	}
	if d := sessionStatus(t, conn, "Com_stmt_prepare") - prepared; d != 2 {
		t.Errorf("40 calls of 2 statements prepared %d statements, want 2", d)
	}
	if d := sessionStatus(t, conn, "Com_stmt_close") - closed; d != 0 {
		t.Errorf("%d statements closed, want none", d)
	}
	// A statement without arguments goes as text, prepared by no one.
	prepared = sessionStatus(t, conn, "Com_stmt_prepare")
	if _, err := conn.ExecContext(ctx, `SET @sqlease_test_v = 1`); err != nil {
		t.Fatal(err)
	}
	if d := sessionStatus(t, conn, "Com_stmt_prepare") - prepared; d != 0 {
		t.Errorf("a statement without arguments prepared %d statements", d)
	}
}

// A connection keeps at most a bounded number of statements: past it, the
// oldest is closed, and every statement still runs.
func TestStatementCacheBounded(t *testing.T) {
	_, conn := pinnedConn(t)
	ctx := t.Context()
	closed := sessionStatus(t, conn, "Com_stmt_close")
	const n = 300 // more than the connection keeps
	for round := range 2 {
		for i := range n {
			var got int
			q := fmt.Sprintf(`SELECT ? + %d`, i)
			if err := conn.QueryRowContext(ctx, q, round).Scan(&got); err != nil || got != round+i {
				t.Fatalf("%s with %d = %d, %v", q, round, got, err)
			}
		}
	}
	d := sessionStatus(t, conn, "Com_stmt_close") - closed
	if d < n || d > 2*n {
		t.Errorf("%d statements closed after 2 × %d distinct ones, want between %d and %d", d, n, n, 2*n)
	}
}

// A kept statement whose table changed (ALTER TABLE) still runs: the
// server prepares it again, or the connection does.
func TestKeptStatementAfterAlter(t *testing.T) {
	db, conn := pinnedConn(t)
	ctx := t.Context()
	table := randomPrefix(t) + "_alter"
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+table+` (id int PRIMARY KEY, v int)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP TABLE `+table) })
	insert := `INSERT INTO ` + table + ` (id, v) VALUES (?, ?)`
	if _, err := conn.ExecContext(ctx, insert, 1, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ALTER TABLE `+table+` ADD COLUMN w int NOT NULL DEFAULT 7, DROP COLUMN v, ADD COLUMN v int`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, insert, 2, 20); err != nil {
		t.Fatalf("the kept insert after ALTER TABLE: %v", err)
	}
	var v, w int
	if err := conn.QueryRowContext(ctx, `SELECT v, w FROM `+table+` WHERE id = ?`, 2).Scan(&v, &w); err != nil || v != 20 || w != 7 {
		t.Fatalf("row 2 = (%d, %d), %v; want (20, 7)", v, w, err)
	}
}

// A transaction at READ COMMITTED, the store's level, runs at it without
// setting it first: the connection's session is at it already. Another
// level is still set for its transaction.
func TestReadCommittedWithoutSet(t *testing.T) {
	_, conn := pinnedConn(t)
	ctx := t.Context()
	var level string
	// MySQL 8 and MariaDB 11.1+ name it transaction_isolation, MariaDB
	// before tx_isolation.
	if err := conn.QueryRowContext(ctx, `SELECT @@transaction_isolation`).Scan(&level); err != nil {
		if err := conn.QueryRowContext(ctx, `SELECT @@tx_isolation`).Scan(&level); err != nil {
			t.Fatal(err)
		}
	}
	if level != "READ-COMMITTED" {
		t.Errorf("session isolation %s, want READ-COMMITTED", level)
	}
	for _, c := range []struct {
		level sql.IsolationLevel
		sets  int
	}{{sql.LevelReadCommitted, 0}, {sql.LevelSerializable, 1}, {sql.LevelDefault, 0}} {
		before := sessionStatus(t, conn, "Com_set_option")
		tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: c.level})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `DO 1`); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if d := sessionStatus(t, conn, "Com_set_option") - before; d != c.sets {
			t.Errorf("BeginTx at %v sent %d SET statements, want %d", c.level, d, c.sets)
		}
	}
}
