package mysqltest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sqlease/sqlease/mysql"
)

func TestWithDatabase(t *testing.T) {
	for in, want := range map[string]string{
		"mysql://u:p@127.0.0.1:3306/sqlease?tls=false": "mysql://u:p@127.0.0.1:3306/db1?tls=false",
		"mysql://u@h/":               "mysql://u@h/db1",
		"mysql://u:p%40ss@h:1/other": "mysql://u:p%40ss@h:1/db1",
	} {
		got, err := WithDatabase(in, "db1")
		if err != nil || got != want {
			t.Errorf("WithDatabase(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestCreateDatabase uses the server scripts/test.sh starts, if any.
func TestCreateDatabase(t *testing.T) {
	shared := os.Getenv(URLEnv)
	if shared == "" {
		t.Skip(URLEnv + " not set")
	}
	var name string
	t.Run("create", func(t *testing.T) {
		db, err := mysql.Open(CreateDatabase(t, shared))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.QueryRowContext(t.Context(), "SELECT DATABASE()").Scan(&name); err != nil {
			t.Fatal(err)
		}
	})
	db, err := mysql.Open(shared)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(context.Background(),
		"SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if name == "" || n != 0 {
		t.Fatalf("database %q: %d left after the test, want it dropped", name, n)
	}
}

// TestStartRestart: a private server takes a database of a test's own, and
// a row committed before a crash (Restart) is there after it.
func TestStartRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MariaDB")
	}
	srv := Start(t)
	u := CreateDatabase(t, srv.URL())
	db, err := mysql.Open(u)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	var n int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&n); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || n != 1 {
		t.Fatalf("after the restart: %d rows, %v; want the committed one", n, err)
	}
}
