package singleton

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
)

// TestBatchStartRefusesOnlyTheMovedOne: a node's first starts of the
// singletons assigned to it are recorded in one batch, which hands each
// body the state saved before; a singleton whose assignment moved between
// the reading of the assignments and the batch (its generation grew) is
// refused alone — its term ends without running the body — and runs
// later under the new generation only.
func TestBatchStartRefusesOnlyTheMovedOne(t *testing.T) {
	ctx := t.Context()
	st := dbtest.SQLite(t)
	names := []string{"x0", "x1", "x2", "x3"}
	for _, name := range names {
		if err := st.EnsureSingleton(ctx, name); err != nil {
			t.Fatal(err)
		}
		if _, err := st.DB().ExecContext(ctx, `UPDATE sqlease_singletons SET state = '{"n":7}' WHERE name = ?`, name); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	beforeBatchStart = func() {
		once.Do(func() {
			// x1 reassigned meanwhile (to this node again, as a Give and
			// a Place would leave it): its generation grows.
			if _, err := st.DB().ExecContext(context.Background(), `UPDATE sqlease_singletons SET generation = generation + 1 WHERE name = 'x1'`); err != nil {
				t.Error(err)
			}
		})
	}
	defer func() { beforeBatchStart = nil }()

	type run struct {
		tok sqlease.Token
		n   int
	}
	var mu sync.Mutex
	runs := map[string][]run{}
	n, err := NewNode(NodeConfig{Store: st, HolderID: "a", LeaseDuration: time.Second, RenewInterval: 150 * time.Millisecond,
		AcquireInterval: 50 * time.Millisecond, RestartBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	type counter struct {
		N int `json:"n"`
	}
	for _, name := range names {
		if err := Register(n, Config[counter]{Name: name, Body: func(ctx context.Context, in *Instance[counter]) error {
			mu.Lock()
			runs[name] = append(runs[name], run{in.Token(), in.State().N})
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
	defer func() { cancel(); <-done }()

	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		k := len(runs)
		mu.Unlock()
		if k == len(names) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bodies run: %v, want all of %v", runs, names)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, name := range names {
		row, err := st.Singleton(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		rs := runs[name]
		if len(rs) != 1 {
			t.Errorf("%s: runs %+v, want one", name, rs)
			continue
		}
		if rs[0].tok.Epoch != row.Generation || row.Node != "a" {
			t.Errorf("%s ran under generation %d; its assignment is %s/%d", name, rs[0].tok.Epoch, row.Node, row.Generation)
		}
		if rs[0].n != 7 {
			t.Errorf("%s started with state %d, want the saved 7", name, rs[0].n)
		}
		if name == "x1" && row.Generation != 2 || name != "x1" && row.Generation != 1 {
			t.Errorf("%s: generation %d", name, row.Generation)
		}
	}
}
