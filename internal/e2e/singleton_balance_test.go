package e2e

import (
	"fmt"
	"sort"
	"syscall"
	"testing"
	"time"
)

// Six daemon singletons on three real nodes settle at 2/2/2; when a node is
// killed its two move to the others (3/3) within the failover bound; when a
// node joins, the fleet evens out again at 2/2/2 (surplus given back).
func TestSingletonsSpreadOverTheFleet(t *testing.T) {
	f := newFleet(t, sqliteDB(t))
	nodes := f.start("a", "b", "c")
	for i := range 6 {
		def := fmt.Sprintf(`{"name":"s%d","command":["sleep","3600"],"heartbeat":"30s","stop_timeout":"1s"}`, i)
		if resp, body := nodes[i%3].do(t, "POST", "/v1/singletons", "", []byte(def)); resp.StatusCode != 201 {
			t.Fatalf("create: %d %s", resp.StatusCode, body)
		}
	}
	spread := func(via *node) map[string]int {
		out := map[string]int{}
		for _, s := range via.singletons(t) {
			if s.Status == "running" || s.Status == "starting" {
				out[s.Holder]++
			}
		}
		return out
	}
	settled := func(via *node, want ...string) func() (bool, string) {
		return func() (bool, string) {
			got := spread(via)
			var counts []int
			for _, h := range want {
				counts = append(counts, got[h])
			}
			sort.Ints(counts)
			even := len(got) == len(want)
			for _, c := range counts {
				even = even && c == 6/len(want)
			}
			return even, fmt.Sprintf("%v", got)
		}
	}
	if err := poll(40*time.Second, settled(nodes[0], "a", "b", "c")); err != nil {
		t.Fatalf("not 2/2/2: %v", err)
	}
	nodes[2].signal(t, syscall.SIGKILL)
	killed := time.Now()
	if err := poll(40*time.Second, settled(nodes[0], "a", "b")); err != nil {
		t.Fatalf("not 3/3 after kill -9 of c: %v", err)
	}
	t.Logf("3/3 %s after kill -9 of c", time.Since(killed).Round(time.Millisecond))
	d := f.waitUp(f.launch("d"))
	joined := time.Now()
	if err := poll(60*time.Second, settled(d, "a", "b", "d")); err != nil {
		t.Fatalf("not 2/2/2 after d joined: %v", err)
	}
	t.Logf("2/2/2 %s after d joined", time.Since(joined).Round(time.Millisecond))
}
