package singleton_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/singleton"
	"github.com/sqlease/sqlease/sqlstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// node is a singleton.Node running until stopped.
type node struct {
	*singleton.Node
	stop func()
}

func newNode(t *testing.T, st *sqlstore.Store, holder string, register func(n *singleton.Node)) *node {
	t.Helper()
	return runNode(t, singleton.NodeConfig{Store: st, HolderID: holder,
		LeaseDuration: time.Second, RenewInterval: 150 * time.Millisecond, AcquireInterval: 50 * time.Millisecond,
		RestartBackoff: 50 * time.Millisecond}, register)
}

// runNode is a node of cfg, its singletons registered by register,
// running until stopped or until the test ends.
func runNode(t *testing.T, cfg singleton.NodeConfig, register func(n *singleton.Node)) *node {
	t.Helper()
	n, err := singleton.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	register(n)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return &node{Node: n, stop: stop}
}

type counter struct {
	N     int               `json:"n"`
	Owner string            `json:"owner"`
	Seen  map[string]int    `json:"seen,omitempty"`
	Extra map[string]string `json:"extra,omitempty"`
}

// A counter singleton survives failover: the next holder resumes from the
// last saved value, saved values never go backwards, and a deposed run's
// Save is refused and changes nothing.
func TestStateSurvivesFailoverAndDeposedSaveIsRefused(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		var mu sync.Mutex
		var saved []int // every value saved, in order
		instances := map[string]*singleton.Instance[counter]{}
		register := func(holder string) func(n *singleton.Node) {
			return func(n *singleton.Node) {
				err := singleton.Register(n, singleton.Config[counter]{Name: "counter", Initial: counter{N: 0},
					HeartbeatInterval: time.Second,
					Body: func(ctx context.Context, in *singleton.Instance[counter]) error {
						mu.Lock()
						instances[holder] = in
						mu.Unlock()
						for ctx.Err() == nil {
							s := in.State()
							s.N++
							s.Owner = holder
							if err := in.Save(ctx, s); err != nil {
								return err
							}
							mu.Lock()
							saved = append(saved, s.N)
							mu.Unlock()
							time.Sleep(5 * time.Millisecond)
						}
						return nil
					}})
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		a := newNode(t, newStore(t), "a", register("a"))
		dbtest.WaitFor(t, 5*time.Second, "a to run it", func() bool { return len(a.Stale()) == 0 && a.Status()[0].Running })
		b := newNode(t, newStore(t), "b", register("b"))
		dbtest.WaitFor(t, 5*time.Second, "a few saves", func() bool { mu.Lock(); defer mu.Unlock(); return len(saved) > 20 })
		if b.Status()[0].Running {
			t.Fatal("both nodes run the singleton")
		}
		a.stop() // graceful: releases the lease
		dbtest.WaitFor(t, 5*time.Second, "b to run it", func() bool { return b.Status()[0].Running })
		mu.Lock()
		atHandoff := len(saved)
		mu.Unlock()
		dbtest.WaitFor(t, 5*time.Second, "b's saves", func() bool { mu.Lock(); defer mu.Unlock(); return len(saved) > atHandoff+20 })

		mu.Lock()
		for i := 1; i < len(saved); i++ {
			if saved[i] != saved[i-1]+1 {
				mu.Unlock()
				t.Fatalf("saved values %d then %d: the new holder did not resume from the last saved state", saved[i-1], saved[i])
			}
		}
		old := instances["a"]
		mu.Unlock()

		// a's instance, deposed, tries to save: refused, nothing changes.
		err := old.Save(ctx, counter{N: -1, Owner: "a"})
		if !errors.Is(err, sqlease.ErrLeaseLost) {
			t.Fatalf("a deposed Save: %v, want ErrLeaseLost", err)
		}
		b.stop()
		row, err := newStore(t).Singleton(ctx, "counter")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := singleton.Decode(row.State, counter{})
		if got.N < 0 || got.Owner != "b" {
			t.Fatalf("stored state after a deposed save: %+v", got)
		}
		mu.Lock()
		last := saved[len(saved)-1]
		mu.Unlock()
		if got.N != last {
			t.Fatalf("stored %d, last saved %d", got.N, last)
		}
	})
}

type v1 struct {
	Cursor int `json:"cursor"`
}

type v2 struct {
	Cursor int    `json:"cursor"`
	Shard  string `json:"shard"`
}

// Decoding is best-effort: a newer state (unknown fields) is read by the
// older type, an older state (missing fields) keeps the initial values,
// and an undecodable one falls back to the initial state.
func TestDecodeBestEffort(t *testing.T) {
	if s, ok := singleton.Decode([]byte(`{"cursor":7,"shard":"eu"}`), v1{Cursor: 1}); !ok || s.Cursor != 7 {
		t.Fatalf("newer state into the older type: %+v %v", s, ok)
	}
	if s, ok := singleton.Decode([]byte(`{"cursor":7}`), v2{Cursor: 1, Shard: "default"}); !ok || s != (v2{Cursor: 7, Shard: "default"}) {
		t.Fatalf("older state into the newer type: %+v %v", s, ok)
	}
	for _, bad := range []string{`{"cursor":"seven"}`, `not json`, `[1,2]`, `{"cursor":`} {
		if s, ok := singleton.Decode([]byte(bad), v2{Cursor: 1, Shard: "default"}); ok || s != (v2{Cursor: 1, Shard: "default"}) {
			t.Fatalf("undecodable %q: %+v %v, want the initial state and ok=false", bad, s, ok)
		}
	}
	if s, ok := singleton.Decode(nil, v2{Cursor: 3}); !ok || s.Cursor != 3 {
		t.Fatalf("nothing saved: %+v %v", s, ok)
	}
	// Decoding never writes through the initial state's maps.
	initial := counter{Seen: map[string]int{"x": 1}}
	s, _ := singleton.Decode([]byte(`{"seen":{"x":5,"y":2}}`), initial)
	if initial.Seen["x"] != 1 || len(initial.Seen) != 1 || s.Seen["y"] != 2 {
		t.Fatalf("initial %v changed by decoding into %v", initial.Seen, s.Seen)
	}
}

// A state saved by another version of the type, or a corrupt one, starts
// the body with the best-effort decode — never a crash loop — and the
// observer hears of the undecodable one.
func TestLoadOlderNewerAndCorruptState(t *testing.T) {
	st := dbtest.SQLite(t)
	for name, state := range map[string]string{"older": `{"cursor":4}`, "newer": `{"cursor":5,"shard":"eu","zone":"z"}`, "corrupt": `{"cursor":`} {
		if _, err := st.DB().Exec(`INSERT INTO sqlease_singletons (name, state, created_at) VALUES (?, ?, '2026-01-01 00:00:00')`, name, state); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]v2{}
	starts := map[string]int{}
	var mu sync.Mutex
	obs := &decodeObserver{}
	runNode(t, singleton.NodeConfig{Store: st, HolderID: "a", Observer: obs,
		LeaseDuration: time.Second, RenewInterval: 150 * time.Millisecond, AcquireInterval: 50 * time.Millisecond}, func(n *singleton.Node) {
		for _, name := range []string{"older", "newer", "corrupt"} {
			if err := singleton.Register(n, singleton.Config[v2]{Name: name, Initial: v2{Cursor: 1, Shard: "default"},
				Body: func(ctx context.Context, in *singleton.Instance[v2]) error {
					mu.Lock()
					got[name] = in.State()
					starts[name]++
					mu.Unlock()
					<-ctx.Done()
					return nil
				}}); err != nil {
				t.Fatal(err)
			}
		}
	})
	dbtest.WaitFor(t, 5*time.Second, "all three to start", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 3 })
	mu.Lock()
	defer mu.Unlock()
	want := map[string]v2{"older": {4, "default"}, "newer": {5, "eu"}, "corrupt": {1, "default"}}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: started with %+v, want %+v", k, got[k], w)
		}
	}
	// Once per start of the corrupt one (a machine loaded enough to lose
	// the node's member lease starts it again, and decodes it again).
	if k := obs.failed.Load(); k < 1 || int(k) != starts["corrupt"] {
		t.Errorf("StateDecodeFailed called %d times, for %d starts of the corrupt one", k, starts["corrupt"])
	}
}

type decodeObserver struct{ failed atomic.Int32 }

func (o *decodeObserver) StateDecodeFailed(string) { o.failed.Add(1) }
func (o *decodeObserver) Running(string, bool)     {}

// 6 singletons on 3 nodes settle at 2/2/2, move to 3/3 when a node stops,
// and even out again when a node joins.
func TestFairShare(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		register := func(n *singleton.Node) {
			for i := range 6 {
				if err := singleton.Register(n, singleton.Config[v1]{Name: fmt.Sprintf("s%d", i),
					Body: func(ctx context.Context, in *singleton.Instance[v1]) error { <-ctx.Done(); return nil }}); err != nil {
					t.Fatal(err)
				}
			}
		}
		held := func(n *node) int {
			k := 0
			for _, s := range n.Status() {
				if s.Running {
					k++
				}
			}
			return k
		}
		spread := func(nodes ...*node) []int {
			var out []int
			for _, n := range nodes {
				out = append(out, held(n))
			}
			return out
		}
		settled := func(want int, nodes ...*node) func() bool {
			return func() bool {
				for _, n := range nodes {
					if held(n) != want {
						return false
					}
				}
				return true
			}
		}
		a := newNode(t, newStore(t), "a", register)
		b := newNode(t, newStore(t), "b", register)
		c := newNode(t, newStore(t), "c", register)
		dbtest.WaitFor(t, 20*time.Second, "2/2/2", settled(2, a, b, c))
		t.Logf("settled at %v", spread(a, b, c))
		c.stop()
		dbtest.WaitFor(t, 20*time.Second, "3/3 after c stopped", settled(3, a, b))
		d := newNode(t, newStore(t), "d", register)
		dbtest.WaitFor(t, 20*time.Second, "2/2/2 after d joined", settled(2, a, b, d))
		t.Logf("after a node left and another joined: %v", spread(a, b, d))
	})
}

// The dead man's switch: a body that stops heart-beating is stale after
// the start grace and 2 × interval; beating again clears it.
func TestStaleHeartbeat(t *testing.T) {
	st := dbtest.SQLite(t)
	var beating atomic.Bool
	interval := 100 * time.Millisecond
	before := time.Now() // no later than the run's start
	n := newNode(t, st, "a", func(n *singleton.Node) {
		if err := singleton.Register(n, singleton.Config[v1]{Name: "worker", HeartbeatInterval: interval,
			Body: func(ctx context.Context, in *singleton.Instance[v1]) error {
				for ctx.Err() == nil {
					if beating.Load() {
						if err := in.Heartbeat(ctx); err != nil {
							return err
						}
					}
					time.Sleep(interval / 4)
				}
				return nil
			}}); err != nil {
			t.Fatal(err)
		}
	})
	dbtest.WaitFor(t, 5*time.Second, "it to run", func() bool { return n.Status()[0].Running })
	dbtest.WaitFor(t, 5*time.Second, "stale", func() bool { return len(n.Stale()) == 1 })
	if d := time.Since(before); d < 2*interval {
		t.Fatalf("stale %s after the start, within the start grace of %s", d, 2*interval)
	}
	if s := n.Status()[0]; s.HeartbeatAge <= 2*interval {
		t.Fatalf("stale with heartbeat age %s", s.HeartbeatAge)
	}
	beating.Store(true)
	dbtest.WaitFor(t, 5*time.Second, "fresh again", func() bool { return len(n.Stale()) == 0 })
	row, err := st.Singleton(context.Background(), "worker")
	if err != nil || row.HeartbeatAt.IsZero() {
		t.Fatalf("heartbeat not stored: %+v %v", row, err)
	}
}

// Singletons can be added to and removed from a running node (the daemon
// follows its table): a removed one stops at once and its lease is free for
// another node.
func TestRegisterAndUnregisterWhileRunning(t *testing.T) {
	st := dbtest.SQLite(t)
	var stopped atomic.Int32
	cfg := singleton.Config[v1]{Name: "late", OnStopped: func(sqlease.Token) { stopped.Add(1) },
		Body: func(ctx context.Context, in *singleton.Instance[v1]) error { <-ctx.Done(); return nil }}
	a := newNode(t, st, "a", func(*singleton.Node) {})
	if err := singleton.Register(a.Node, cfg); err != nil {
		t.Fatal(err)
	}
	if err := singleton.Register(a.Node, cfg); !errors.Is(err, sqlease.ErrConflict) {
		t.Fatalf("registering twice: %v", err)
	}
	dbtest.WaitFor(t, 5*time.Second, "a to run it", func() bool { return len(a.Status()) == 1 && a.Status()[0].Running })
	b := newNode(t, st, "b", func(n *singleton.Node) {
		if err := singleton.Register(n, cfg); err != nil {
			t.Fatal(err)
		}
	})
	if !a.Unregister("late") || a.Unregister("late") {
		t.Fatal("Unregister: want true once, then false")
	}
	if stopped.Load() != 1 || len(a.Status()) != 0 {
		t.Fatalf("after Unregister: stopped %d, status %+v", stopped.Load(), a.Status())
	}
	dbtest.WaitFor(t, 5*time.Second, "b to take it over", func() bool { return b.Status()[0].Running })
}

func postgresStore(tb testing.TB) *sqlstore.Store {
	return dbtest.Postgres(tb)
}

// Rolling upgrade: a node of the protocol before placement by node runs a
// singleton on its own lease "singleton:<name>". A node placing by node
// leaves it alone while that lease is live, places it once it is released,
// and from then on an old node cannot acquire that lease: the two never run
// it both.
func TestOldProtocolLeaseAndPlacementExcludeEachOther(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		old, err := st.Acquire(ctx, singleton.LeasePrefix+"legacy", "old-node", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		var started atomic.Int32
		n := newNode(t, st, "new", func(n *singleton.Node) {
			for _, name := range []string{"legacy", "fresh"} {
				if err := singleton.Register(n, singleton.Config[v1]{Name: name,
					Body: func(ctx context.Context, in *singleton.Instance[v1]) error {
						if in.Token().Name == singleton.LeasePrefix+"legacy" {
							started.Add(1)
						}
						<-ctx.Done()
						return nil
					}}); err != nil {
					t.Fatal(err)
				}
			}
		})
		running := func(name string) bool {
			for _, s := range n.Status() {
				if s.Name == name {
					return s.Running
				}
			}
			return false
		}
		dbtest.WaitFor(t, 5*time.Second, "fresh to run", func() bool { return running("fresh") })
		time.Sleep(600 * time.Millisecond) // a few placement rounds
		if started.Load() != 0 {
			t.Fatal("the new node started a singleton whose old lease an old node holds live")
		}
		if err := st.Release(ctx, old.Token()); err != nil {
			t.Fatal(err)
		}
		dbtest.WaitFor(t, 5*time.Second, "legacy to run once the old node released it", func() bool { return running("legacy") })
		if _, err := st.Acquire(ctx, singleton.LeasePrefix+"legacy", "old-node", time.Second); !errors.Is(err, sqlease.ErrLeaseHeld) {
			t.Fatalf("an old node acquiring the lease of a singleton placed by node: %v, want ErrLeaseHeld", err)
		}
		if _, err := st.Acquire(ctx, singleton.LeasePrefix+"fresh", "old-node", time.Second); !errors.Is(err, sqlease.ErrLeaseHeld) {
			t.Fatalf("an old node acquiring the lease of a singleton placed by node: %v, want ErrLeaseHeld", err)
		}
	})
}

// A body's writes of its own, fenced by its run (Instance.Fenced), commit
// while its node holds the singleton, and a deposed run's commit nothing:
// after a handover its Fenced returns ErrLeaseLost and the table is
// unchanged.
func TestFencedWritesOfTheBody(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		if _, err := st.DB().ExecContext(ctx, `CREATE TABLE effects (holder VARCHAR(64) NOT NULL, epoch BIGINT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		runs := map[string]*singleton.Instance[v1]{}
		register := func(holder string) func(n *singleton.Node) {
			return func(n *singleton.Node) {
				if err := singleton.Register(n, singleton.Config[v1]{Name: "effects",
					Body: func(ctx context.Context, in *singleton.Instance[v1]) error {
						mu.Lock()
						runs[holder] = in
						mu.Unlock()
						<-ctx.Done()
						return nil
					}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		q := `INSERT INTO effects (holder, epoch) VALUES (?, ?)`
		if st.Dialect().Name == "postgres" {
			q = `INSERT INTO effects (holder, epoch) VALUES ($1, $2)`
		}
		insert := func(in *singleton.Instance[v1]) error {
			return in.Fenced(ctx, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, q, in.Token().Holder, in.Token().Epoch)
				return err
			})
		}
		count := func() int {
			var k int
			if err := st.DB().QueryRowContext(ctx, `SELECT count(*) FROM effects`).Scan(&k); err != nil {
				t.Fatal(err)
			}
			return k
		}
		a := newNode(t, newStore(t), "a", register("a"))
		dbtest.WaitFor(t, 5*time.Second, "a to run it", func() bool { mu.Lock(); defer mu.Unlock(); return runs["a"] != nil })
		mu.Lock()
		ra := runs["a"]
		mu.Unlock()
		if err := insert(ra); err != nil {
			t.Fatalf("a fenced write of the running body: %v", err)
		}
		b := newNode(t, newStore(t), "b", register("b"))
		a.stop()
		dbtest.WaitFor(t, 5*time.Second, "b to run it", func() bool { mu.Lock(); defer mu.Unlock(); return runs["b"] != nil })
		if err := insert(ra); !errors.Is(err, sqlease.ErrLeaseLost) {
			t.Fatalf("a deposed run's fenced write: %v, want ErrLeaseLost", err)
		}
		// The database's fence alone (a's own gate, closed, is not asked).
		if err := st.FencedAssigned(ctx, "effects", ra.Token(), func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, q, "a", ra.Token().Epoch)
			return err
		}); !errors.Is(err, sqlease.ErrLeaseLost) {
			t.Fatalf("a write fenced by a deposed run's assignment, in the database: %v, want ErrLeaseLost", err)
		}
		if k := count(); k != 1 {
			t.Fatalf("%d rows after a deposed run's fenced write, want 1", k)
		}
		mu.Lock()
		rb := runs["b"]
		mu.Unlock()
		if err := insert(rb); err != nil {
			t.Fatalf("the new holder's fenced write: %v", err)
		}
		if k := count(); k != 2 {
			t.Fatalf("%d rows, want 2", k)
		}
		_ = b
	})
}
