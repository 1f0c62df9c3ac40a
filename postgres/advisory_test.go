package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/storetest"
)

func newLocker(t *testing.T, prefix string) sqlease.SessionLocker {
	t.Helper()
	l, err := postgres.NewLocker(postgres.AdvisoryConfig{DSN: databaseURL(t), Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func openLock(t *testing.T, locker sqlease.SessionLocker) sqlease.SessionLock {
	t.Helper()
	l, err := locker(t.Context(), "adv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

func TestLockKeyStable(t *testing.T) {
	a, b := postgres.LockKey("sqlease:sqlease:leader"), postgres.LockKey("sqlease:sqlease:leader")
	if a != b || a == postgres.LockKey("sqlease:other:leader") {
		t.Fatal("lock keys must be stable and differ by scope")
	}
}

// A follower blocked in Lock gets the lock when the holder closes, and when
// the holder's session is killed; takeover bumps the epoch of an unexpired
// lease and fences the previous holder.
func TestAdvisoryLockHandoverAndTakeover(t *testing.T) {
	s, prefix := newStoreWithPrefix(t)
	locker := newLocker(t, prefix)
	ctx := t.Context()

	a := openLock(t, locker)
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	// Bad arguments are refused before any statement, as by a store.
	if _, err := a.Takeover(ctx, "adv", "holder-a", 0); !errors.Is(err, sqlease.ErrInvalidConfig) {
		t.Fatalf("takeover with a zero duration: %v, want ErrInvalidConfig", err)
	}
	if _, err := a.Takeover(ctx, "adv", "holder a", time.Minute); !errors.Is(err, sqlease.ErrInvalidName) {
		t.Fatalf("takeover by a holder id with a space: %v, want ErrInvalidName", err)
	}
	la, err := a.Takeover(ctx, "adv", "holder-a", time.Minute)
	if err != nil || la.Epoch != 1 {
		t.Fatalf("takeover: %+v %v", la, err)
	}
	if _, err := a.Renew(ctx, la.Token(), time.Minute); err != nil {
		t.Fatalf("renew through the session: %v", err)
	}

	b := openLock(t, locker)
	got := make(chan time.Time, 1)
	go func() {
		if err := b.Lock(ctx); err == nil {
			got <- time.Now()
		}
	}()
	select {
	case <-got:
		t.Fatal("two sessions hold the lock")
	case <-time.After(200 * time.Millisecond):
	}

	// Kill a's session from outside, as a crash would: Lost fires without a
	// poll, and b gets the lock.
	var pid int
	if err := s.DB().QueryRowContext(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = 'sqlease-advisory' AND wait_event_type IS DISTINCT FROM 'Lock' AND state = 'idle' LIMIT 1`).Scan(&pid); err != nil {
		t.Fatalf("find a's backend: %v", err)
	}
	killed := time.Now()
	if _, err := s.DB().ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Lost():
		t.Logf("a noticed its session end after %s", time.Since(killed))
	case <-time.After(5 * time.Second):
		t.Fatal("Lost not closed after the session was terminated")
	}
	select {
	case at := <-got:
		t.Logf("b got the lock %s after a's session was killed", at.Sub(killed))
	case <-time.After(5 * time.Second):
		t.Fatal("b did not get the lock")
	}
	// The lease is still unexpired (a minute): b takes it over anyway.
	lb, err := b.Takeover(ctx, "adv", "holder-b", time.Minute)
	if err != nil || lb.Epoch != 2 || lb.Holder != "holder-b" {
		t.Fatalf("takeover of an unexpired lease: %+v %v", lb, err)
	}
	if err := s.Fenced(ctx, la.Token(), func(*sql.Tx) error { return nil }); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("the previous holder's fence: want ErrLeaseLost, got %v", err)
	}
	if _, err := a.Renew(ctx, la.Token(), time.Minute); !errors.Is(err, sqlease.ErrSessionLost) {
		t.Fatalf("renew on a dead session: want ErrSessionLost, got %v", err)
	}
}

// Electors in advisory mode: one leads; when its lock session dies, another
// leads at once — long before the lease (a minute) would expire.
func TestAdvisoryElectorFailover(t *testing.T) {
	s, prefix := newStoreWithPrefix(t)
	locker := newLocker(t, prefix)
	var leaders atomic.Int32
	start := func(holder string) (*election.Elector, func()) {
		return storetest.RunElector(t, election.Config{Store: s, SessionLocker: locker, LeaseName: "adv", HolderID: holder,
			LeaseDuration: time.Minute, RenewInterval: 200 * time.Millisecond, AcquireInterval: 100 * time.Millisecond,
			OnStartedLeading: func(ctx context.Context, tok sqlease.Token) { leaders.Add(1); <-ctx.Done(); leaders.Add(-1) }})
	}
	a, stopA := start("a")
	waitUntil(t, 5*time.Second, func() bool { return a.IsLeader() })
	b, _ := start("b")
	time.Sleep(300 * time.Millisecond)
	if b.IsLeader() || leaders.Load() != 1 {
		t.Fatalf("leaders: %d", leaders.Load())
	}
	tokA, _ := a.Require(t.Context())

	// Graceful handoff: a closes its session; b takes over at once.
	stopped := time.Now()
	stopA()
	waitUntil(t, 5*time.Second, func() bool { return b.IsLeader() })
	t.Logf("graceful handoff in advisory mode: %s", time.Since(stopped))
	tokB, _ := b.Require(t.Context())
	if tokB.Epoch != tokA.Epoch+1 {
		t.Fatalf("epochs %d -> %d", tokA.Epoch, tokB.Epoch)
	}
}

func waitUntil(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
