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
	if got := syncCommit(t, postgres.Open, url); got != "on" {
		t.Fatalf("synchronous_commit = %q on sqlease's sessions, want on", got)
	}
	// What a plain session gets: scripts/test.sh configures off.
	plain := func(url string) (*sql.DB, error) { return sql.Open("pgx", url) }
	t.Logf("the server's default: synchronous_commit = %s", syncCommit(t, plain, url))

	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	if got := syncCommit(t, postgres.Open, url+sep+"synchronous_commit=local"); got != "local" {
		t.Fatalf("an explicit setting: %q, want local", got)
	}
}

// syncCommit opens a pool for url with open and reads synchronous_commit
// on one of its sessions.
func syncCommit(t *testing.T, open func(url string) (*sql.DB, error), url string) string {
	t.Helper()
	db, err := open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got string
	if err := db.QueryRow(`SHOW synchronous_commit`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	return got
}
