package mysql

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/sqlease/sqlease/internal/syncbuf"
)

// Open routes the driver's messages, a pool's and the driver's default
// logger's, to the logger of SetDriverLogger, keeping them structured.
func TestDriverLoggerAdapter(t *testing.T) {
	var logs syncbuf.Buffer
	SetDriverLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { SetDriverLogger(nil) })
	db, err := Open("mysql://u:p@127.0.0.1:1/db")
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	cfg, err := mysql.ParseDSN("u:p@tcp(127.0.0.1:1)/db")
	if err != nil {
		t.Fatal(err)
	}
	// ParseDSN's config carries the driver's default logger, which Open
	// replaced by the adapter.
	cfg.Logger.Print("closing bad idle connection: ", errors.New("EOF"))
	want := `level=WARN msg=mysql_driver text="closing bad idle connection: EOF"`
	if got := logs.String(); !strings.Contains(got, want) {
		t.Errorf("log %q, want a record %s", got, want)
	}
}
