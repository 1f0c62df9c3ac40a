package pgtest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestStartStopStart(t *testing.T) {
	s := Start(t)
	ctx := context.Background()

	conn := connect(t, s.URL())
	// synchronous_commit=on so that the commit survives the immediate stop.
	if _, err := conn.Exec(ctx, `SET synchronous_commit = on;
		CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)`); err != nil {
		t.Fatal(err)
	}

	begin := time.Now()
	s.Stop(t)
	t.Logf("stop took %v", time.Since(begin))

	if err := conn.Ping(ctx); err == nil {
		t.Fatal("ping on an old connection succeeded after Stop")
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if c, err := pgx.Connect(cctx, s.URL()); err == nil {
		c.Close(ctx)
		t.Fatal("new connection succeeded after Stop")
	}
	s.Stop(t) // stopping a stopped server is a no-op

	begin = time.Now()
	s.Start(t)
	t.Logf("start took %v", time.Since(begin))

	var v int
	if err := connect(t, s.URL()).QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 42 {
		t.Fatalf("after restart: v=%d err=%v", v, err)
	}

	s.Restart(t)
	if err := connect(t, s.URL()).Ping(ctx); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
}

func TestCreateDatabase(t *testing.T) {
	s := Start(t)
	ctx := context.Background()

	var names [2]string
	t.Run("isolated", func(t *testing.T) {
		a := connect(t, CreateDatabase(t, s.URL()))
		b := connect(t, CreateDatabase(t, s.URL()))
		for i, c := range []*pgx.Conn{a, b} {
			if err := c.QueryRow(ctx, "SELECT current_database()").Scan(&names[i]); err != nil {
				t.Fatal(err)
			}
		}
		if names[0] == names[1] || names[0] == "postgres" {
			t.Fatalf("databases not distinct: %q", names)
		}
		if _, err := a.Exec(ctx, "CREATE TABLE only_in_a (v int)"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Exec(ctx, "SELECT * FROM only_in_a"); err == nil {
			t.Fatal("table of database a visible in database b")
		}
	})

	// The subtest's cleanup dropped both, although its connections were
	// still open when the drop ran (WITH (FORCE)).
	var n int
	if err := connect(t, s.URL()).QueryRow(ctx,
		"SELECT count(*) FROM pg_database WHERE datname = ANY($1)", names[:]).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d test databases left after cleanup", n)
	}
}

func TestWithDatabase(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable": "postgres://postgres@127.0.0.1:5432/db1?sslmode=disable",
		"postgresql://u:p@h/":           "postgresql://u:p@h/db1",
		"host=h user=u dbname=postgres": "host=h user=u dbname=postgres dbname=db1",
	} {
		got, err := withDatabase(in, "db1")
		if err != nil || got != want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestSharedServer uses the server scripts/test.sh starts, if any.
func TestSharedServer(t *testing.T) {
	shared := os.Getenv("SQLEASE_TEST_POSTGRES_URL")
	if shared == "" {
		t.Skip("SQLEASE_TEST_POSTGRES_URL not set")
	}
	var v string
	if err := connect(t, CreateDatabase(t, shared)).QueryRow(context.Background(), "SHOW server_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	t.Logf("shared server version %s", v)
}

// TestReplicaFailover: a streaming replica follows its primary, keeps only
// what it received once the replication is cut, and is promoted to a new
// timeline after the primary is killed.
func TestReplicaFailover(t *testing.T) {
	p := Start(t)
	r := p.StartReplica(t)
	ctx := context.Background()
	pc := connect(t, p.URL())
	if _, err := pc.Exec(ctx, `CREATE TABLE kept (v int); INSERT INTO kept VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	r.WaitReplayed(t, p)
	r.CutReplication(t)
	if _, err := pc.Exec(ctx, `SET synchronous_commit = on; INSERT INTO kept VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	p.Kill(t)
	if err := pc.Ping(ctx); err == nil {
		t.Fatal("ping on the killed primary succeeded")
	}
	if tl := r.Promote(t); tl != 2 {
		t.Errorf("timeline after the promotion: %d, want 2", tl)
	}
	var n int
	if err := connect(t, r.URL()).QueryRow(ctx, `INSERT INTO kept VALUES (3) RETURNING (SELECT count(*) FROM kept)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("the promoted replica has %d rows before its own insert, want 1 (the one written before the cut)", n)
	}
}
