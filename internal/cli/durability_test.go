package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sqlease/sqlease/internal/dbtest"
)

// A node on a MySQL/MariaDB server that can lose acknowledged commits says
// so at start (the test server does not flush at commit).
func TestNodeWarnsOfWeakMySQLDurability(t *testing.T) {
	cfg := defaultConfig()
	cfg.DB = dbtest.MySQLURL(t)
	cfg.HTTP = "127.0.0.1:0"
	var logs bytes.Buffer
	n, err := NewNode(t.Context(), cfg, &logs)
	if err != nil {
		t.Fatal(err)
	}
	n.listener.Close()
	n.close()
	if out := logs.String(); !strings.Contains(out, "database_durability_weak") || !strings.Contains(out, "innodb_flush_log_at_trx_commit=") {
		t.Fatalf("no durability warning at start; logged:\n%s", out)
	}
}
