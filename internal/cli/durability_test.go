package cli

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/sqlease/sqlease/internal/mysqltest"
)

// A node on a MySQL/MariaDB server that can lose acknowledged commits says
// so at start (the test server does not flush at commit).
func TestNodeWarnsOfWeakMySQLDurability(t *testing.T) {
	url := os.Getenv(mysqltest.URLEnv)
	if url == "" {
		t.Skip(mysqltest.URLEnv + " not set; bash scripts/test.sh sets it")
	}
	cfg := defaultConfig()
	cfg.DB = mysqltest.CreateDatabase(t, url)
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
