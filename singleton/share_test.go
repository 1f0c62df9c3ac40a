package singleton

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/dbtest"
)

// TestBurstOfReadingsTakesNoMoreThanTheShare: singletons that come
// unplaced while every node holds its share go to the node below its
// share, not to one that reads the placement often. Readings come at every
// kick as well as every renew interval; counted alone, a burst of them
// passed for "nobody else takes them", and the node that read most took
// them beyond its share, started them and gave them away again — each
// moved twice (CI, TestSingletonsMoveOnceOnKillAndJoin).
func TestBurstOfReadingsTakesNoMoreThanTheShare(t *testing.T) {
	ctx := t.Context()
	st := dbtest.SQLite(t)
	var mu sync.Mutex
	starts := map[string][]string{} // singleton → the nodes that started it, in order
	newNode := func(holder string) *Node {
		n, err := NewNode(NodeConfig{Store: st, HolderID: holder, LeaseDuration: 2 * time.Second, RenewInterval: 300 * time.Millisecond,
			AcquireInterval: 50 * time.Millisecond, RestartBackoff: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			name := fmt.Sprintf("s%d", i)
			if err := Register(n, Config[struct{}]{Name: name, Body: func(ctx context.Context, in *Instance[struct{}]) error {
				mu.Lock()
				starts[name] = append(starts[name], holder)
				mu.Unlock()
				<-ctx.Done()
				return nil
			}}); err != nil {
				t.Fatal(err)
			}
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = n.Run(rctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return n
	}
	running := func(n *Node) []string {
		var names []string
		for _, s := range n.Status() {
			if s.Running {
				names = append(names, s.Name)
			}
		}
		return names
	}
	a, b := newNode("a"), newNode("b")
	dbtest.WaitFor(t, 20*time.Second, "3/3", func() bool { return len(running(a)) == 3 && len(running(b)) == 3 })
	moved := running(b)[:2]
	mu.Lock()
	before := map[string]int{moved[0]: len(starts[moved[0]]), moved[1]: len(starts[moved[1]])}
	mu.Unlock()
	// Two of b's come unplaced (as when their node's member lease is
	// taken over); a, at its share, reads the placement in a burst.
	if _, err := st.DB().ExecContext(ctx, `UPDATE sqlease_singletons SET node_id = NULL WHERE name IN (?, ?)`, moved[0], moved[1]); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(400 * time.Millisecond); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
	dbtest.WaitFor(t, 20*time.Second, "3/3 again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(running(a)) == 3 && len(running(b)) == 3 && len(starts[moved[0]]) > before[moved[0]] && len(starts[moved[1]]) > before[moved[1]]
	})
	mu.Lock()
	defer mu.Unlock()
	for _, name := range moved {
		for _, h := range starts[name][before[name]:] {
			if h != "b" {
				t.Errorf("%s, unplaced while a held its share, started on %v: a took it beyond its share", name, starts[name])
				break
			}
		}
	}
}
