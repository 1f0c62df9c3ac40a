// Package mysqltest gives tests a database of their own on a MySQL or
// MariaDB server, such as the one scripts/test.sh starts and names in
// SQLEASE_TEST_MYSQL_URL.
package mysqltest

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/testserver"
	"github.com/sqlease/sqlease/mysql"
)

// URLEnv names the server tests use; scripts/test.sh sets it.
const URLEnv = "SQLEASE_TEST_MYSQL_URL"

// CreateDatabase creates a new, uniquely named database on the server at
// rawURL (a mysql:// URL of a user allowed to create and drop databases) and
// returns the same URL naming that database. The database is dropped when
// the test finishes.
func CreateDatabase(t testing.TB, rawURL string) string {
	t.Helper()
	name := testserver.DatabaseName(t.Name())
	db, err := mysql.Open(rawURL)
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		t.Fatalf("mysqltest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		db, err := mysql.Open(rawURL)
		if err != nil {
			t.Errorf("mysqltest: %v", err)
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("mysqltest: dropping database %s: %v", name, err)
		}
	})
	u, err := WithDatabase(rawURL, name)
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	return u
}

// WithDatabase returns the mysql:// URL rawURL naming database name instead.
func WithDatabase(rawURL, name string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("parsing the URL: %w", err)
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}
