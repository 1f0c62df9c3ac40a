package mysql_test

import (
	"bytes"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/sqlease/sqlease/mysql"
)

func TestDurabilityWeak(t *testing.T) {
	for _, tc := range []struct {
		d    mysql.Durability
		weak []string
	}{
		{mysql.Durability{FlushLogAtTrxCommit: 1}, nil},
		{mysql.Durability{FlushLogAtTrxCommit: 1, LogBin: true, SyncBinlog: 1}, nil},
		{mysql.Durability{FlushLogAtTrxCommit: 1, LogBin: false, SyncBinlog: 0}, nil},
		{mysql.Durability{FlushLogAtTrxCommit: 2}, []string{"innodb_flush_log_at_trx_commit=2 (want 1)"}},
		{mysql.Durability{FlushLogAtTrxCommit: 0, LogBin: true, SyncBinlog: 0},
			[]string{"innodb_flush_log_at_trx_commit=0 (want 1)", "sync_binlog=0 with the binary log on (want 1)"}},
	} {
		if got := tc.d.Weak(); !reflect.DeepEqual(got, tc.weak) {
			t.Errorf("%+v.Weak() = %q, want %q", tc.d, got, tc.weak)
		}
	}
}

// The test server acknowledges commits it has not flushed
// (innodb_flush_log_at_trx_commit 0 or 2, see scripts/test.sh and
// internal/mysqltest): sqlease says so at start.
func TestWarnWeakDurability(t *testing.T) {
	s := newStore(t)
	d, err := mysql.ReadDurability(t.Context(), s.DB())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("test server: %+v", d)
	if d.FlushLogAtTrxCommit == 1 {
		t.Fatal("the test server flushes at every commit; this test needs one that does not")
	}
	var buf bytes.Buffer
	mysql.WarnWeakDurability(t.Context(), s.DB(), slog.New(slog.NewTextHandler(&buf, nil)))
	out := buf.String()
	if !strings.Contains(out, "level=WARN msg=database_durability_weak") || !strings.Contains(out, "innodb_flush_log_at_trx_commit=") {
		t.Fatalf("no durability warning against a server that does not flush at commit; logged:\n%s", out)
	}
}
