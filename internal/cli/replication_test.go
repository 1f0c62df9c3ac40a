package cli

import (
	"net/http"
	"strings"
	"testing"
	"time"
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
	n := runNode(t, func(c *Config) { c.RequireSyncReplication = true })
	node, logs := n.Node, n.log

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
