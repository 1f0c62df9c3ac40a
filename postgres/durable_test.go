package postgres_test

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/sqlease/sqlease/postgres"
)

// A 2xx means durable (G6): sqlease's own sessions commit with
// synchronous_commit = on even on a server whose default is off (the test
// server's is), unless the connection string says otherwise.
func TestSessionsCommitSynchronously(t *testing.T) {
	url := databaseURL(t)
	db, err := postgres.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got string
	if err := db.QueryRow(`SHOW synchronous_commit`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != "on" {
		t.Fatalf("synchronous_commit = %q on sqlease's sessions, want on", got)
	}
	// What a plain session gets: scripts/test.sh configures off.
	plain, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	var server string
	if err := plain.QueryRow(`SHOW synchronous_commit`).Scan(&server); err != nil {
		t.Fatal(err)
	}
	t.Logf("the server's default: synchronous_commit = %s", server)

	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	explicit, err := postgres.Open(url + sep + "synchronous_commit=local")
	if err != nil {
		t.Fatal(err)
	}
	defer explicit.Close()
	if err := explicit.QueryRow(`SHOW synchronous_commit`).Scan(&got); err != nil || got != "local" {
		t.Fatalf("an explicit setting: %q %v, want local", got, err)
	}
}
