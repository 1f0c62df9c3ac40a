package e2e

import (
	"fmt"
	"slices"
	"sort"
	"syscall"
	"testing"
	"time"
)

// Placement by node (issue 32) with real daemons: kill -9 of a node holding
// several singletons moves every one of them to the live nodes, each once —
// none goes back to the dead node, none that ran elsewhere stops, and none
// is stopped again once it runs — and a joining node receives its fair
// share, each singleton moving once. Lease mode on SQLite; advisory mode on
// PostgreSQL, where the dead node's session lock frees its singletons.
func TestSingletonsMoveOnceOnKillAndJoin(t *testing.T) {
	pg := postgresDB(t)
	for _, b := range []struct {
		backend
		flags []string
	}{{backend{name: "sqlite", db: sqliteDB}, nil}, {backend{name: "postgres-advisory", db: pg}, []string{"--election", "advisory"}}} {
		t.Run(b.name, func(t *testing.T) {
			const n = 9
			f := newFleet(t, b.db(t), b.flags...)
			nodes := f.start("a", "b", "c")
			for i := range n {
				def := fmt.Sprintf(`{"name":"p%d","command":["sleep","3600"],"heartbeat":"30s","stop_timeout":"1s"}`, i)
				if resp, body := nodes[i%3].do(t, "POST", "/v1/singletons", "", []byte(def)); resp.StatusCode != 201 {
					t.Fatalf("create: %d %s", resp.StatusCode, body)
				}
			}
			type at struct {
				holder string
				epoch  int64
			}
			view := func(via *node) map[string]at {
				out := map[string]at{}
				for _, s := range via.singletons(t) {
					// A sleep never beats: starting until its grace (2 × 30 s) ends.
					if s.Status == "running" || s.Status == "starting" {
						out[s.Name] = at{s.Holder, s.Epoch}
					}
				}
				return out
			}
			// balanced: all n run, on the given holders only, none above
			// ⌈n / holders⌉.
			balanced := func(via *node, holders ...string) func() (bool, string) {
				return func() (bool, string) {
					v := view(via)
					count := map[string]int{}
					for _, a := range v {
						count[a.holder]++
					}
					ok := len(v) == n
					for h, c := range count {
						ok = ok && c <= (n+len(holders)-1)/len(holders) && slices.Contains(holders, h)
					}
					return ok, fmt.Sprintf("%d running: %v", len(v), count)
				}
			}
			if err := poll(40*time.Second, balanced(nodes[0], "a", "b", "c")); err != nil {
				t.Fatalf("not balanced on a, b, c: %v", err)
			}
			before := view(nodes[0])
			victim := nodes[2]
			var onVictim []string
			for name, a := range before {
				if a.holder == victim.holder {
					onVictim = append(onVictim, name)
				}
			}
			sort.Strings(onVictim)
			if len(onVictim) == 0 {
				t.Fatalf("c holds no singleton: %v", before)
			}
			victim.signal(t, syscall.SIGKILL)
			killed := time.Now()
			// Watched every 20 ms from the kill: each singleton's holders
			// and epochs in order.
			seen := map[string][]at{}
			record := func(v map[string]at) {
				for name, a := range v {
					if s := seen[name]; len(s) == 0 || s[len(s)-1] != a {
						seen[name] = append(seen[name], a)
					}
				}
			}
			var took time.Duration
			if err := poll(40*time.Second, func() (bool, string) {
				v := view(nodes[0])
				record(v)
				for _, name := range onVictim {
					if a, ok := v[name]; !ok || a.holder == victim.holder {
						return false, fmt.Sprintf("%s: %v", name, v[name])
					}
				}
				took = time.Since(killed)
				return len(v) == n, fmt.Sprintf("%d running", len(v))
			}); err != nil {
				t.Fatalf("the dead node's singletons did not all move: %v", err)
			}
			t.Logf("kill -9 of c holding %d: all running on a and b %s later", len(onVictim), took.Round(time.Millisecond))
			if b.flags == nil && took > failoverBound {
				t.Errorf("failover took %s, want within %s (lease + acquire + slack)", took, failoverBound)
			}
			// Advisory: the dead node's session lock frees its singletons,
			// well before its lease could expire.
			if b.flags != nil && took > leaseDuration*3/4 {
				t.Errorf("advisory failover took %s, want well within the lease (%s): found by the session lock, not the expiry", took, leaseDuration)
			}
			// Balanced on the two live nodes: the dead one is not counted.
			if err := poll(4*renewInterval, func() (bool, string) {
				v := view(nodes[0])
				record(v)
				return balanced(nodes[0], "a", "b")()
			}); err != nil {
				t.Fatalf("not balanced on a and b after the kill: %v", err)
			}
			// Quiet for 8 renew intervals: nothing stops or moves again.
			for end := time.Now().Add(8 * renewInterval); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				v := view(nodes[0])
				if len(v) != n {
					t.Fatalf("after the failover only %d of %d run: %v", len(v), n, v)
				}
				record(v)
			}
			for name, s := range seen {
				moved := slices.Contains(onVictim, name)
				if moved && len(s) > 1 && s[0] == before[name] {
					s = s[1:] // still shown on the dead node until its lease ended
				}
				switch {
				case !moved && (len(s) != 1 || s[0] != before[name]):
					t.Errorf("%s ran on %v and was not on the dead node, but went %v", name, before[name], s)
				case moved && len(s) != 1:
					t.Errorf("%s moved more than once after the kill: %v", name, s)
				case moved && (s[0].holder == victim.holder || s[0].epoch <= before[name].epoch):
					t.Errorf("%s after the kill: %v, was %v", name, s[0], before[name])
				}
			}
			// A node joins: it receives its share, each singleton moving
			// at most once.
			settled := view(nodes[0])
			seen = map[string][]at{}
			d := f.waitUp(f.launch("d"))
			joined := time.Now()
			if err := poll(40*time.Second, func() (bool, string) {
				v := view(nodes[0])
				record(v)
				return balanced(nodes[0], "a", "b", "d")()
			}); err != nil {
				t.Fatalf("not balanced after d joined: %v", err)
			}
			t.Logf("balanced %s after d joined", time.Since(joined).Round(time.Millisecond))
			for end := time.Now().Add(4 * renewInterval); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				record(view(d))
			}
			gave := 0
			for name, s := range seen {
				if s[0] != settled[name] {
					s = append([]at{settled[name]}, s...)
				}
				if len(s) > 2 {
					t.Errorf("%s moved more than once when d joined: %v", name, s)
				}
				if len(s) == 2 {
					gave++
					if s[1].holder != d.holder {
						t.Errorf("%s moved to %s, not to the joining node: %v", name, s[1].holder, s)
					}
				}
			}
			if want := n / 3; gave != want {
				t.Errorf("%d singletons moved to d, want its share %d", gave, want)
			}
		})
	}
}
