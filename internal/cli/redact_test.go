package cli_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// No password reaches stderr, whatever form the database setting takes
// (issue 11): every dialect's URL (passwords with #, /, @, %, :), libpq
// key/value strings, go-sql-driver DSNs, ADO strings and SQLite file URIs.
// Nothing listens on the ports, so each command fails — after parsing, or
// while parsing — and its message must not hold the password or any run of
// 4 or more of its letters and digits.
func TestPasswordsNeverPrinted(t *testing.T) {
	const pw = "Hunter2#/@:%41zz"
	forms := map[string]string{
		"postgres URL":            "postgres://u:hunter2pw@127.0.0.1:1/db",
		"postgres URL, odd chars": "postgres://u:" + pw + "@127.0.0.1:1/db",
		"postgresql URL, query":   "postgresql://u@127.0.0.1:1/db?password=hunter2pw&sslmode=disable",
		"libpq key/value":         "host=127.0.0.1 port=1 user=u password=hunter2pw dbname=db",
		"libpq quoted":            "host=127.0.0.1 port=1 user=u password='hunter 2\\'pw' dbname=db",
		"mysql URL":               "mysql://root:hunter2pw@127.0.0.1:1/app",
		"mysql URL, odd chars":    "mysql://root:" + pw + "@127.0.0.1:1/app",
		"go-sql-driver DSN":       "root:hunter2pw@tcp(127.0.0.1:1)/app",
		"sqlserver URL":           "sqlserver://sa:hunter2pw@127.0.0.1:1?database=app",
		"ADO":                     "server=127.0.0.1;port=1;user id=sa;password=hunter2pw;database=app",
		"ADO braces":              "server=127.0.0.1;user id=sa;Password={hunter2;pw};database=app",
		// In a temporary directory: the path is a file name (escaped), which
		// a run in the package directory used to create there.
		"sqlite auth": "sqlite:file:" + filepath.Join(t.TempDir(), "x.db") + "?_auth&_auth_user=u&_auth_pass=hunter2pw",
	}
	for name, db := range forms {
		t.Run(name, func(t *testing.T) {
			for _, cmd := range [][]string{{"migrate", "--db", db}, {"status", "--db", db}} {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				r := runCtx(t, ctx, map[string]string{}, "", cmd...)
				cancel()
				if r.code == 0 {
					continue // an SQLite file opened fine: nothing to print
				}
				secret := "hunter2pw"
				if strings.Contains(db, pw) {
					secret = pw
				} else if strings.Contains(db, "hunter 2") {
					secret = "hunter 2\\'pw"
				} else if strings.Contains(db, "{hunter2;pw}") {
					secret = "hunter2;pw"
				}
				// The secret and each run of 4+ letters and digits in it.
				parts := append([]string{secret}, strings.FieldsFunc(secret, func(r rune) bool {
					return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
				})...)
				for _, part := range parts {
					if len(part) >= 4 && strings.Contains(r.stderr+r.stdout, part) {
						t.Fatalf("%q of the password appears:\n%s", part, r)
					}
				}
			}
		})
	}
}
