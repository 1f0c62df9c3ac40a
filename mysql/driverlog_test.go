package mysql_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/syncbuf"
	"github.com/sqlease/sqlease/mysql"
)

// The driver's own messages reach slog as structured records: the server
// ends an idle connection of the pool, and the driver's note that it
// replaces it is one JSON record (msg mysql_driver, the text in text),
// not a "[mysql] …" line on standard error.
func TestDriverMessagesGoToSlog(t *testing.T) {
	u := databaseURL(t)
	var logs syncbuf.Buffer
	mysql.SetDriverLogger(slog.New(slog.NewJSONHandler(&logs, nil)))
	t.Cleanup(func() { mysql.SetDriverLogger(nil) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := mysql.Open(u)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	var id int64
	if err := db.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	admin, err := mysql.Open(u)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "KILL CONNECTION ?", id); err != nil {
		t.Fatal(err)
	}
	// The pool's one connection is now closed by the server: its next use
	// finds it bad, and the driver says so before taking a new one.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "mysql_driver") {
		if time.Now().After(deadline) {
			t.Fatalf("no mysql_driver record after the server closed an idle connection; log:\n%s", logs.String())
		}
		var one int
		_ = db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
		time.Sleep(20 * time.Millisecond)
	}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON record: %q", line)
		}
		text, _ := rec["text"].(string)
		if rec["msg"] != "mysql_driver" || rec["level"] != "WARN" || text == "" || strings.HasPrefix(text, "[mysql]") {
			t.Errorf("record %s: want level WARN, msg mysql_driver and the driver's text in text", line)
		}
	}
}
