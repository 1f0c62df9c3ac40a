package postgres

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sqlease/sqlease/internal/pgtest"
)

// The advisory session writes too — its takeover bumps the epoch — so it
// commits with synchronous_commit = on like the pool: an epoch handed out
// and then forgot in a server crash would be handed out again. The test
// server's default is off.
func TestAdvisorySessionCommitsSynchronously(t *testing.T) {
	ctx := t.Context()
	sess, url := testSession(t, "sqlease", "durable")
	var got string
	if err := sess.do(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&got)
	}); err != nil {
		t.Fatal(err)
	}
	if got != "on" {
		t.Fatalf("synchronous_commit = %q on the advisory session, want on", got)
	}
	// And the store's own pool, as OpenStore makes it.
	st, err := OpenStore(ctx, pgtest.CreateDatabase(t, url), "sqlease")
	if err != nil {
		t.Fatal(err)
	}
	defer st.DB().Close()
	if err := st.DB().QueryRowContext(ctx, `SHOW synchronous_commit`).Scan(&got); err != nil || got != "on" {
		t.Fatalf("synchronous_commit = %q (%v) on the store's pool, want on", got, err)
	}
}
