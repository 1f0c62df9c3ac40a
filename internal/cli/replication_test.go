package cli

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/syncbuf"
)

// Each node says how durable its writes are (issue 31 item 3): /readyz ends
// with durability=…, the metrics export it, and the dashboard shows it.
func TestReadyzSaysDurability(t *testing.T) {
	n := startNode(t, nil)
	// The node is ready before its first look at the database's
	// replication may have answered (a busy machine): wait for it.
	body, code := get(n.addr, "/readyz")
	for deadline := time.Now().Add(15 * time.Second); code != 200 || !strings.Contains(body, "durability=single standbys=0 sync_standbys=0"); body, code = get(n.addr, "/readyz") {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %d %q", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	metrics, _ := get(n.addr, "/metrics")
	for _, want := range []string{"sqlease_replication_synchronous 0", `sqlease_replication_standbys{sync="false"} 0`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if page, _ := get(n.addr, "/"); !strings.Contains(page, `id="durability"`) || !strings.Contains(page, "single server") {
		t.Errorf("the overview shows no durability badge")
	}
}

// With --require-synchronous-replication a node whose writes would not
// survive a failover (here: an embedded SQLite file, never replicated)
// neither leads nor accepts writes, and /readyz says why.
func TestRequireSynchronousReplication(t *testing.T) {
	cfg := defaultConfig()
	cfg.DB = "sqlite:" + filepath.Join(t.TempDir(), "sqlease.db")
	cfg.HTTP = "127.0.0.1:0"
	cfg.LeaseDuration, cfg.RenewInterval, cfg.AcquireInterval = 2*time.Second, 300*time.Millisecond, 100*time.Millisecond
	cfg.RequireSyncReplication = true
	logs := &syncbuf.Buffer{}
	node, err := NewNode(context.Background(), cfg, logs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- node.Run(ctx) }()
	defer func() { cancel(); <-done }()
	_, port, _ := net.SplitHostPort(node.Addr())
	n := &testNode{Node: node, addr: net.JoinHostPort("127.0.0.1", port), log: logs}

	time.Sleep(time.Second) // several acquire intervals
	body, code := get(n.addr, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "reason=replication_not_synchronous") || !strings.Contains(body, "durability=single") {
		t.Errorf("/readyz: %d %q", code, body)
	}
	if node.elector.IsLeader() {
		t.Error("the node leads although its writes would not survive a failover")
	}
	r := n.call(t, "POST", "/v1/jobs", `{"name":"x","schedule":{},"action":{"http":{"url":"http://127.0.0.1:9/"}}}`)
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "require-synchronous-replication") {
		t.Errorf("a write: %d %s", r.status, r.body)
	}
	if r := n.call(t, "GET", "/v1/jobs", ""); r.status != 200 {
		t.Errorf("a read: %d %s", r.status, r.body)
	}
	// Refusing is quiet: not a warning every acquire interval.
	if c := strings.Count(logs.String(), "level=WARN msg=leader_acquire_failed"); c > 0 {
		t.Errorf("%d leader_acquire_failed warnings in a second of refusing", c)
	}
}
