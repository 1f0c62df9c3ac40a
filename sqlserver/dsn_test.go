package sqlserver_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/microsoft/go-mssqldb/azuread"
	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlserver"
)

func TestEntraIDAndPassword(t *testing.T) {
	for _, tc := range []struct {
		dsn           string
		entra, secret bool
	}{
		{"sqlserver://sa:S3cret@db.example.com:1433?database=app", false, true},
		{"sqlserver://sa@db.example.com?database=app", false, false},
		{"sqlserver://sa:@db.example.com?database=app", false, false},
		{"sqlserver://db.example.com?database=app&password=S3cret", false, true},
		{"sqlserver://db.example.com?database=app&PassWord=S3cret", false, true},
		{"sqlserver://srv.database.windows.net?database=app&fedauth=ActiveDirectoryDefault", true, false},
		{"sqlserver://srv.database.windows.net?database=app&FedAuth=ActiveDirectoryManagedIdentity&user+id=client-id", true, false},
		{"sqlserver://app-id%40tenant:S3cret@srv.database.windows.net?database=app&fedauth=ActiveDirectoryServicePrincipal", true, true},
		{"server=db.example.com;user id=sa;password=S3cret;database=app", false, true},
		{"Server=db.example.com;UID=sa;PWD=S3cret;Database=app", false, true},
		{`server=db;user id=sa;password="a;b""c";database=app`, false, true},
		{"server=srv.database.windows.net;database=app;fedauth=ActiveDirectoryDefault", true, false},
		{"odbc:server=db;uid=sa;pwd={S3c;ret}}x};database=app", false, true},
		{"odbc:server=db;database=app;fedauth=ActiveDirectoryAzCli", true, false},
		{"server=db;database=app", false, false},
	} {
		if got := sqlserver.UsesEntraID(tc.dsn); got != tc.entra {
			t.Errorf("UsesEntraID(%q) = %v, want %v", tc.dsn, got, tc.entra)
		}
		if got := sqlserver.HasPassword(tc.dsn); got != tc.secret {
			t.Errorf("HasPassword(%q) = %v, want %v", tc.dsn, got, tc.secret)
		}
		wantDriver := "sqlserver"
		if tc.entra {
			wantDriver = azuread.DriverName
		}
		if got := sqlserver.DriverName(tc.dsn); got != wantDriver {
			t.Errorf("DriverName(%q) = %q, want %q", tc.dsn, got, wantDriver)
		}
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct {
		dsn, want string
		secrets   []string
	}{
		{"sqlserver://sa:S3cret@db.example.com:1433?database=app", "sqlserver://sa:xxxxx@db.example.com:1433?database=app", []string{"S3cret"}},
		{"sqlserver://sa:p%40ss%3Aword@db:1433/inst?database=app", "sqlserver://sa:xxxxx@db:1433/inst?database=app", []string{"p@ss:word", "p%40ss%3Aword"}},
		{"sqlserver://db?database=app&password=S3cret", "sqlserver://db?database=app&password=xxxxx", []string{"S3cret"}},
		{"sqlserver://db?Password=S3cret&clientassertion=eyJhbGciOi", "sqlserver://db?Password=xxxxx&clientassertion=xxxxx", []string{"S3cret", "eyJhbGciOi"}},
		{"sqlserver://srv.database.windows.net?database=app&fedauth=ActiveDirectoryDefault",
			"sqlserver://srv.database.windows.net?database=app&fedauth=ActiveDirectoryDefault", nil},
		{"server=db;user id=sa;password=S3cret;database=app", "server=db;user id=sa;password=xxxxx;database=app", []string{"S3cret"}},
		{"Server=db; UID=sa; PWD = S3cret ;Database=app", "Server=db; UID=sa; PWD =xxxxx;Database=app", []string{"S3cret"}},
		{`server=db;password="se;cr""et";database=app`, "server=db;password=xxxxx;database=app", []string{"se;cr", `cr""et`, "et"}},
		{"odbc:server=db;pwd={se;cr}}et};database=app", "odbc:server=db;pwd=xxxxx;database=app", []string{"se;cr", "}et"}},
		{"odbc:server=db;pwd= {se;cr}} et} ;database=app", "odbc:server=db;pwd=xxxxx;database=app", []string{"se;cr", "et}"}},
		{"server=db;database=app", "server=db;database=app", nil},
		{"sqlserver://sa:S3cret@[::1", "sqlserver://(unparsable connection string)", []string{"S3cret"}},
	} {
		got := sqlserver.Redact(tc.dsn)
		if got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.dsn, got, tc.want)
		}
		for _, s := range tc.secrets {
			if strings.Contains(got, s) {
				t.Errorf("Redact(%q) = %q still shows %q", tc.dsn, got, s)
			}
		}
		if sqlserver.HasPassword(got) && !strings.Contains(got, "xxxxx") {
			t.Errorf("Redact(%q) = %q carries a password", tc.dsn, got)
		}
	}
}

func TestWithEntraID(t *testing.T) {
	for dsn, want := range map[string]string{
		"sqlserver://srv.database.windows.net?database=app":                                   "sqlserver://srv.database.windows.net?database=app&fedauth=ActiveDirectoryDefault",
		"sqlserver://srv.database.windows.net?database=app&fedauth=ActiveDirectoryMSI":        "sqlserver://srv.database.windows.net?database=app&fedauth=ActiveDirectoryMSI",
		"server=srv.database.windows.net;database=app;":                                       "server=srv.database.windows.net;database=app;fedauth=ActiveDirectoryDefault",
		"odbc:server=srv.database.windows.net;database=app":                                   "odbc:server=srv.database.windows.net;database=app;fedauth=ActiveDirectoryDefault",
		"sqlserver://srv.database.windows.net:1433/inst?database=app&app+name=sqlease-worker": "sqlserver://srv.database.windows.net:1433/inst?app+name=sqlease-worker&database=app&fedauth=ActiveDirectoryDefault",
	} {
		got, err := sqlserver.WithEntraID(dsn)
		if err != nil || got != want {
			t.Errorf("WithEntraID(%q) = (%q, %v), want %q", dsn, got, err, want)
		}
		if !sqlserver.UsesEntraID(got) {
			t.Errorf("UsesEntraID(WithEntraID(%q)) = false", dsn)
		}
	}
	for _, dsn := range []string{"sqlserver://sa:S3cret@srv?database=app", "server=srv;password=S3cret"} {
		got, err := sqlserver.WithEntraID(dsn)
		if !errors.Is(err, sqlease.ErrInvalidConfig) || got != "" {
			t.Errorf("WithEntraID(%q) = (%q, %v), want ErrInvalidConfig", dsn, got, err)
		}
		if err != nil && strings.Contains(err.Error(), "S3cret") {
			t.Errorf("WithEntraID error %q shows the password", err)
		}
	}
}

// TestOpen: Open checks the connection string and routes it to the right
// driver without connecting.
func TestOpen(t *testing.T) {
	for _, dsn := range []string{
		"sqlserver://sa:S3cret@127.0.0.1:1?database=app",
		"server=127.0.0.1;port=1;user id=sa;password=S3cret;database=app",
		"sqlserver://srv.database.windows.net?database=app&fedauth=ActiveDirectoryDefault",
		"sqlserver://127.0.0.1:1?database=app&timezone=UTC",
	} {
		db, err := sqlserver.Open(dsn)
		if err != nil {
			t.Errorf("Open(%q): %v", sqlserver.Redact(dsn), err)
			continue
		}
		db.Close()
	}
	for _, tc := range []struct{ dsn, why string }{
		{"", "empty"},
		{"   ", "blank"},
		{"sqlserver://sa:S3cret@127.0.0.1:1?database=app&timezone=Europe/Paris", "a non-UTC timezone shifts every datetime2"},
		{"sqlserver://sa:S3cret@127.0.0.1:notaport?database=app", "a malformed port"},
		{"sqlserver://sa:S3cret@127.0.0.1?database=app&dial+timeout=soon", "a malformed parameter"},
		// Routed through azuread, whose own checks refuse this workflow
		// without an application client id: Open must not have used the
		// plain driver.
		{"sqlserver://user%40example.com:S3cret@srv.database.windows.net?database=app&fedauth=ActiveDirectoryPassword", "an incomplete Entra ID workflow"},
	} {
		db, err := sqlserver.Open(tc.dsn)
		if !errors.Is(err, sqlease.ErrInvalidConfig) {
			if db != nil {
				db.Close()
			}
			t.Errorf("Open with %s = %v, want ErrInvalidConfig", tc.why, err)
			continue
		}
		if strings.Contains(err.Error(), "S3cret") {
			t.Errorf("Open error %q shows the password", err)
		}
	}
}

func ExampleRedact() {
	fmt.Println(sqlserver.Redact("sqlserver://sa:S3cret@db.example.com:1433?database=app"))
	fmt.Println(sqlserver.Redact("server=db.example.com;user id=sa;password=S3cret;database=app"))
	fmt.Println(sqlserver.HasPassword("sqlserver://srv.database.windows.net?database=app&fedauth=ActiveDirectoryDefault"))
	// Output:
	// sqlserver://sa:xxxxx@db.example.com:1433?database=app
	// server=db.example.com;user id=sa;password=xxxxx;database=app
	// false
}
