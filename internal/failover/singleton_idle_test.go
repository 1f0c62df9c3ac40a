package failover

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestSingletonIdleCost measures what idle singletons cost the database:
// three lease-mode nodes on PostgreSQL, first with no singletons, then with
// six (a sleeping command, heartbeat 1h so nothing goes stale or restarts),
// balanced 2/2/2 before the window opens. Placed by node (issue 32), the
// difference is per node, not per singleton: each node's member-lease
// renewal and its read of the placement, once per renew interval.
func TestSingletonIdleCost(t *testing.T) {
	srv, csvPath := idleServer(t)
	const k = 6
	const window = 20 * time.Second // > the hosts' 15 s idle sync period
	setup := func(t *testing.T) idleSetup {
		return idleSetup{before: func(db string) {
			run := func(stdin string, args ...string) {
				cmd := exec.Command(bin, append(args, "--db", db)...)
				cmd.Stdin = strings.NewReader(stdin)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("sqlease %s: %v\n%s", strings.Join(args, " "), err, out)
				}
			}
			run("", "migrate")
			for i := range k {
				run(fmt.Sprintf(`{"name":"idle-%d","command":["sleep","3600"],"heartbeat":"1h","stop_timeout":"1s"}`, i), "singletons", "add", "-f", "-")
			}
		},
			ready: func(c *cluster) { waitBalanced(t, c, k, time.Minute) },
		}
	}
	// The two fleets, each on a database of its own, are measured at once.
	var base, with idleCost
	t.Run("measure", func(t *testing.T) {
		t.Run("base", func(t *testing.T) {
			t.Parallel()
			base = measureIdle(t, srv.URL(), csvPath, "lease, no singletons", "lease", 2*time.Second, window)
		})
		t.Run("singletons", func(t *testing.T) {
			t.Parallel()
			with = measureIdleWith(t, srv.URL(), csvPath, fmt.Sprintf("lease, %d singletons", k), "lease", 2*time.Second, window, setup(t))
		})
	})
	if t.Failed() {
		return
	}
	per := (with.stmts - base.stmts) / 3
	t.Logf("idle singletons: %.2f statements/s without, %.2f with %d: %.2f statements/s per node\n%s",
		base.stmts, with.stmts, k, per, idleTable([]idleCost{base, with}))
	// Expected per node: its member lease renewed and the placement read
	// every RenewInterval (2 s): 1/s, and the assignments read every 15
	// readings; before placement by node, 1.41/s per singleton.
	if per > 1.5 {
		t.Errorf("the singletons cost %.2f statements/s per node, want ≤ 1.5 (member renewal and placement read every 2 s): is a node reading per singleton?", per)
	}
	if per < 0.3 {
		t.Errorf("the singletons cost %.2f statements/s per node: they did not run (or the measurement is broken)", per)
	}
}

// waitBalanced waits until k singletons run, each node holding k/3.
func waitBalanced(t *testing.T, c *cluster, k int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last map[string]int
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + c.running()[0].Addr + "/v1/singletons")
		if err == nil {
			var l struct {
				Singletons []struct{ Holder, Status string }
			}
			err = json.NewDecoder(resp.Body).Decode(&l)
			resp.Body.Close()
			last = map[string]int{}
			for _, s := range l.Singletons {
				if s.Status == "running" || s.Status == "starting" {
					last[s.Holder]++
				}
			}
			balanced := len(last) == 3
			for _, n := range last {
				balanced = balanced && n == k/3
			}
			if err == nil && balanced {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("singletons not balanced %d per node within %v: %v", k/3, timeout, last)
}
