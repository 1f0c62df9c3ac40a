package cli_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sqlease/sqlease/sqlite"
	"github.com/sqlease/sqlease/sqlstore"
)

// TestStatusHistory: status --history prints the leader lease's history,
// newest first; --history=NAME another lease's.
func TestStatusHistory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	s, err := sqlite.OpenStore(context.Background(), path, "sqlease")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []sqlstore.LeaseEvent{
		{Lease: "sqlease-leader", Event: sqlstore.EventAcquired, Holder: "node-a", Epoch: 1},
		{Lease: "sqlease-leader", Event: sqlstore.EventTakenOver, Holder: "node-b", Epoch: 2, Reason: "the lease of node-a (epoch 1) expired without a release"},
		{Lease: "other", Event: sqlstore.EventLost, Holder: "node-c", Epoch: 7, Reason: "renew failed"},
	} {
		if err := s.RecordLeaseEvent(context.Background(), e, 0); err != nil {
			t.Fatal(err)
		}
	}
	s.DB().Close()
	db := "sqlite:" + path
	out := run(t, nil, "", "status", "--db", db, "--history").ok(t).stdout
	b, a := strings.Index(out, "taken_over  node-b"), strings.Index(out, "acquired    node-a")
	if b < 0 || a < 0 || b > a || !strings.Contains(out, "expired without a release") || strings.Contains(out, "node-c") {
		t.Errorf("status --history:\n%s", out)
	}
	out = run(t, nil, "", "status", "--db", db, "--history=other").ok(t).stdout
	if !strings.Contains(out, "lost") || !strings.Contains(out, "node-c") {
		t.Errorf("status --history=other:\n%s", out)
	}
	if out := run(t, nil, "", "status", "--db", db).ok(t).stdout; strings.Contains(out, "leadership history") {
		t.Errorf("status without --history shows it:\n%s", out)
	}
}
