package election_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql keeps a connection opener per pool until Close.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}

// fast returns a config with short timings for tests.
func fast(s sqlease.LeaseStore, holder string) election.Config {
	return election.Config{
		Store:           s,
		HolderID:        holder,
		LeaseDuration:   600 * time.Millisecond,
		RenewInterval:   100 * time.Millisecond,
		AcquireInterval: 50 * time.Millisecond,
		SafetyMargin:    100 * time.Millisecond,
	}
}

func TestConfigValidate(t *testing.T) {
	s := dbtest.SQLite(t)
	if err := (election.Config{Store: s}).Validate(); err != nil {
		t.Fatalf("defaults must be valid: %v", err)
	}
	cases := []struct {
		name string
		cfg  election.Config
		want string
	}{
		{"no store", election.Config{}, "store is required"},
		{"renew not shorter", election.Config{Store: s, LeaseDuration: time.Second, RenewInterval: time.Second}, "renew_interval (1s) must be shorter than lease_duration (1s)"},
		{"no room for margin", election.Config{Store: s, LeaseDuration: 6 * time.Second, RenewInterval: 5500 * time.Millisecond, SafetyMargin: time.Second}, "lease_duration - safety_margin"},
		{"bad lease name", election.Config{Store: s, LeaseName: "a b"}, "lease_name"},
		{"bad holder", election.Config{Store: s, HolderID: strings.Repeat("x", 129)}, "holder_id"},
		{"negative renew", election.Config{Store: s, RenewInterval: -time.Second}, "renew_interval must be positive"},
		{"margin too big", election.Config{Store: s, LeaseDuration: time.Second, RenewInterval: 100 * time.Millisecond, SafetyMargin: time.Second}, "safety_margin"},
		{"jitter", election.Config{Store: s, AcquireJitter: 1.5}, "acquire_jitter"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := election.New(c.cfg)
			if !errors.Is(err, sqlease.ErrInvalidConfig) {
				t.Fatalf("want ErrInvalidConfig, got %v", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
		})
	}
	// Several broken rules: one error each.
	_, err := election.New(election.Config{LeaseName: "?", RenewInterval: -1})
	if n := len(strings.Split(err.Error(), "\n")); n != 3 {
		t.Fatalf("want 3 errors (store, lease_name, renew_interval), got %d: %v", n, err)
	}
}

func TestDefaultHolderID(t *testing.T) {
	a, b := election.DefaultHolderID(), election.DefaultHolderID()
	if a == b {
		t.Fatalf("holder ids must differ between instances: %q", a)
	}
	if err := sqlease.ValidateHolderID(a); err != nil {
		t.Fatal(err)
	}
}

func TestOneLeaderThenGracefulHandoff(t *testing.T) {
	s := dbtest.SQLite(t)
	var started, stopped atomic.Int32
	cfgA := fast(s, "a")
	cfgA.OnStartedLeading = func(ctx context.Context, tok sqlease.Token) { started.Add(1); <-ctx.Done() }
	cfgA.OnStoppedLeading = func(sqlease.Token) { stopped.Add(1) }
	a, stopA := storetest.RunElector(t, cfgA)
	dbtest.WaitFor(t, 5*time.Second, "a to lead", a.IsLeader)

	b, _ := storetest.RunElector(t, fast(s, "b"))
	dbtest.WaitFor(t, 5*time.Second, "b to observe a", func() bool { return b.Status().Leader.Holder == "a" })
	if b.IsLeader() {
		t.Fatal("two leaders")
	}
	if _, err := b.Require(context.Background()); !errors.Is(err, sqlease.ErrNotLeader) {
		t.Fatalf("follower passed the gate: %v", err)
	}
	tokA, err := a.Require(context.Background())
	if err != nil || tokA.Epoch != 1 {
		t.Fatalf("leader token %v, %v", tokA, err)
	}

	// Graceful stop releases the lease: b leads well before a's lease
	// (600ms) would have expired from its last renew.
	stopAt := time.Now()
	stopA()
	if started.Load() != 1 || stopped.Load() != 1 {
		t.Fatalf("callbacks: started %d stopped %d", started.Load(), stopped.Load())
	}
	if a.IsLeader() {
		t.Fatal("a still leads after Run returned")
	}
	// Released, not left to expire: the row says so as soon as Run has
	// returned (how soon b then leads depends on the machine).
	if l, err := s.Lease(context.Background(), tokA.Name); err != nil || !l.Expired() || l.Epoch != tokA.Epoch {
		t.Fatalf("after a's graceful stop the lease reads %v (expired %v), %v: not released", l.Token(), l.Expired(), err)
	}
	dbtest.WaitFor(t, 5*time.Second, "b to lead", b.IsLeader)
	t.Logf("handoff took %s", time.Since(stopAt))
	tokB, _ := b.Require(context.Background())
	if tokB.Epoch != 2 || tokB.Holder != "b" {
		t.Fatalf("b token %v, want epoch 2", tokB)
	}
	if err := a.Ensure(tokA); !errors.Is(err, sqlease.ErrNotLeader) {
		t.Fatalf("old token passed Ensure: %v", err)
	}
}

func TestFenceFailureDropsLeadershipAtOnce(t *testing.T) {
	s := dbtest.SQLite(t)
	leadCtx := make(chan context.Context, 1)
	stopped := make(chan sqlease.Token, 1)
	cfg := fast(s, "a")
	cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin = 10*time.Second, 3*time.Second, time.Second
	cfg.OnStartedLeading = func(ctx context.Context, tok sqlease.Token) { leadCtx <- ctx; <-ctx.Done() }
	cfg.OnStoppedLeading = func(tok sqlease.Token) { stopped <- tok }
	e, _ := storetest.RunElector(t, cfg)
	dbtest.WaitFor(t, 5*time.Second, "leadership", e.IsLeader)
	tok, _ := e.Require(context.Background())

	// Another instance takes the row over behind the leader's back.
	if _, err := s.DB().Exec(`UPDATE sqlease_leases SET holder_id = 'intruder', lease_epoch = lease_epoch + 1`); err != nil {
		t.Fatal(err)
	}
	called := false
	err := e.Fenced(context.Background(), tok, func(*sql.Tx) error { called = true; return nil })
	if !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("want ErrLeaseLost, got %v", err)
	}
	if called {
		t.Fatal("fn ran under a failed fence")
	}
	// The gate closed synchronously, before Fenced returned.
	if _, err := e.Require(context.Background()); !errors.Is(err, sqlease.ErrNotLeader) {
		t.Fatalf("gate still open after a failed fence: %v", err)
	}
	ctx := <-leadCtx
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
		t.Fatal("leading context not cancelled")
	}
	if got := <-stopped; got != tok {
		t.Fatalf("stopped %v, want %v", got, tok)
	}
	if err := e.Fenced(context.Background(), tok, func(*sql.Tx) error { return nil }); !errors.Is(err, sqlease.ErrNotLeader) {
		t.Fatalf("stale token: want ErrNotLeader from the gate, got %v", err)
	}
}

// offsetClock is the system clock shifted forward by a settable offset; it
// keeps the monotonic reading.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

func TestLocalDeadlineClosesGateWithoutDatabase(t *testing.T) {
	s := dbtest.SQLite(t)
	clk := &offsetClock{}
	cfg := fast(s, "a")
	cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin = 10*time.Second, 3*time.Second, time.Second
	cfg.Clock = clk
	e, _ := storetest.RunElector(t, cfg)
	dbtest.WaitFor(t, 5*time.Second, "leadership", e.IsLeader)
	tok, _ := e.Require(context.Background())
	if err := e.Healthy(); err != nil {
		t.Fatal(err)
	}
	// Jump past trustedUntil = sentAt + 10s - 1s, as a paused process would
	// see on waking; the database is not consulted.
	clk.off.Store(int64(9 * time.Second))
	if _, err := e.Require(context.Background()); !errors.Is(err, sqlease.ErrNotLeader) {
		t.Fatalf("gate open past the local deadline: %v", err)
	}
	if err := e.Ensure(tok); !errors.Is(err, sqlease.ErrNotLeader) {
		t.Fatalf("Ensure passed past the local deadline: %v", err)
	}
	if err := e.Healthy(); err == nil {
		t.Fatal("Healthy must fail when the leader missed its deadline")
	}
}

func TestRenewFailureDropsLeadership(t *testing.T) {
	s := dbtest.SQLite(t)
	var mu sync.Mutex
	var stoppedAt time.Time
	cfg := fast(s, "a")
	cfg.OnStoppedLeading = func(sqlease.Token) { mu.Lock(); stoppedAt = time.Now(); mu.Unlock() }
	e, _ := storetest.RunElector(t, cfg)
	dbtest.WaitFor(t, 5*time.Second, "leadership", e.IsLeader)
	closedAt := time.Now()
	s.DB().Close() // every later statement fails
	dbtest.WaitFor(t, 5*time.Second, "leadership dropped", func() bool { return !e.IsLeader() })
	dbtest.WaitFor(t, 5*time.Second, "OnStoppedLeading", func() bool { mu.Lock(); defer mu.Unlock(); return !stoppedAt.IsZero() })
	if st := e.Status(); st.LastError == nil {
		t.Fatal("Status.LastError should report the database error")
	}
	t.Logf("dropped %s after the database went away", stoppedAt.Sub(closedAt))
}

func TestRunTwice(t *testing.T) {
	s := dbtest.SQLite(t)
	e, _ := storetest.RunElector(t, fast(s, "a"))
	dbtest.WaitFor(t, 5*time.Second, "leadership", e.IsLeader)
	if err := e.Run(context.Background()); err == nil {
		t.Fatal("second Run must fail")
	}
}

// lateAcquire answers each Acquire late, as a loaded database does.
type lateAcquire struct {
	sqlease.LeaseStore
	late   time.Duration
	renews atomic.Int32
}

func (s *lateAcquire) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (sqlease.Lease, error) {
	l, err := s.LeaseStore.Acquire(ctx, name, holder, ttl)
	time.Sleep(s.late)
	return l, err
}

func (s *lateAcquire) Renew(ctx context.Context, tok sqlease.Token, ttl time.Duration) (sqlease.Lease, error) {
	s.renews.Add(1)
	return s.LeaseStore.Renew(ctx, tok, ttl)
}

// TestLateAcquireRenewsBeforeActing: a term's trust counts from its
// acquire's sending, so an acquire answered late would begin a term with
// most of its trust spent — a run started then is cut off while its
// receiver works on, and the next leader sends it again as soon as the
// lease expires. Such a term renews before it acts: it begins with a
// renew's full trust, or not at all.
func TestLateAcquireRenewsBeforeActing(t *testing.T) {
	s := &lateAcquire{LeaseStore: dbtest.SQLite(t), late: 700 * time.Millisecond}
	cfg := fast(s, "a")
	cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin = 2*time.Second, 300*time.Millisecond, 300*time.Millisecond
	var mu sync.Mutex
	var left time.Duration
	var renewsBefore int32
	var ep atomic.Pointer[election.Elector] // set long before the first acquire answers
	cfg.OnStartedLeading = func(ctx context.Context, tok sqlease.Token) {
		st := ep.Load().Status()
		mu.Lock()
		left, renewsBefore = time.Until(st.TrustedUntil), s.renews.Load()
		mu.Unlock()
		<-ctx.Done()
	}
	e, _ := storetest.RunElector(t, cfg)
	ep.Store(e)
	dbtest.WaitFor(t, 10*time.Second, "leadership", func() bool { mu.Lock(); defer mu.Unlock(); return left != 0 })
	mu.Lock()
	defer mu.Unlock()
	// Without the renew: 2s - 0.3s - 0.7s = 1.0s of trust at most.
	if renewsBefore < 1 || left < 1400*time.Millisecond {
		t.Fatalf("the term began with %s of trust after %d renews: want a renew first, and over 1.4s", left, renewsBefore)
	}
	t.Logf("the term began with %s of trust after %d renew(s)", left, renewsBefore)
}
