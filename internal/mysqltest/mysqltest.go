// Package mysqltest gives tests a database of their own on a MySQL or
// MariaDB server, such as the one scripts/test.sh starts and names in
// SQLEASE_TEST_MYSQL_URL.
package mysqltest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

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
	name := databaseName(t.Name())
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

// databaseName makes a valid, unique database name (at most 64 characters)
// that hints at the test that created it.
func databaseName(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		if b.Len() == 40 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	return "sqlease_" + b.String() + "_" + hex.EncodeToString(rnd[:])
}
