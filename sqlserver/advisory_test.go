package sqlserver_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/sqlserver"
	"github.com/sqlease/sqlease/sqlstore"
	"github.com/sqlease/sqlease/storetest"
)

// These tests run advisory mode on a real server, when SQLEASE_TEST_SQLSERVER_DSN
// names one (see databaseDSN); without it they skip, and only the static
// and scripted tests (advisory_internal_test.go, advisory_session_test.go)
// run. The DSN's login must be allowed to KILL sessions (ALTER ANY
// CONNECTION, e.g. sa) for the crash tests.

// newAdvisoryStore opens a store under a fresh random prefix, and a locker
// on the same tables.
func newAdvisoryStore(t *testing.T) (*sqlstore.Store, sqlease.SessionLocker) {
	t.Helper()
	dsn := databaseDSN(t)
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	prefix := "t" + hex.EncodeToString(b)
	s, err := sqlserver.OpenStore(t.Context(), dsn, prefix)
	if err != nil {
		t.Fatalf("OpenStore(%s): %v", sqlserver.Redact(dsn), err)
	}
	t.Cleanup(func() {
		defer s.DB().Close()
		if err := dropTables(s.DB(), prefix); err != nil {
			t.Errorf("drop tables of prefix %s: %v", prefix, err)
		}
	})
	locker, err := sqlserver.NewLocker(sqlserver.AdvisoryConfig{DSN: dsn, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s, locker
}

func openAdvisory(t *testing.T, locker sqlease.SessionLocker, name string) sqlease.SessionLock {
	t.Helper()
	l, err := locker(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

// lockAsync starts Lock and reports when it returns.
func lockAsync(ctx context.Context, l sqlease.SessionLock) <-chan error {
	done := make(chan error, 1)
	go func() { done <- l.Lock(ctx) }()
	return done
}

// Two sessions exclude each other; when the holder's session is killed, as
// a crash would end it, Lost closes and the waiting session gets the lock,
// both well under a second; its takeover bumps the epoch of the unexpired
// lease and fences the old holder.
func TestAdvisoryKillTakeover(t *testing.T) {
	s, locker := newAdvisoryStore(t)
	ctx := t.Context()

	a := openAdvisory(t, locker, "adv")
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	la, err := a.Takeover(ctx, "adv", "holder-a", time.Minute)
	if err != nil || la.Epoch != 1 || la.Holder != "holder-a" || la.Remaining() < 59*time.Second {
		t.Fatalf("first takeover: %+v %v", la, err)
	}
	if _, err := a.Renew(ctx, la.Token(), time.Minute); err != nil {
		t.Fatalf("renew through the session: %v", err)
	}

	b := openAdvisory(t, locker, "adv")
	got := lockAsync(ctx, b)
	select {
	case err := <-got:
		t.Fatalf("two sessions hold the lock (b's Lock returned %v)", err)
	case <-time.After(500 * time.Millisecond):
	}
	// Another lease's lock is another lock.
	other := openAdvisory(t, locker, "adv2")
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := other.Lock(octx); err != nil {
		t.Fatalf("lock of another lease: %v", err)
	}

	spid, err := sqlserver.SessionID(a)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if _, err := s.DB().ExecContext(ctx, "KILL "+strconv.FormatInt(spid, 10)); err != nil {
		t.Fatalf("KILL %d (needs ALTER ANY CONNECTION): %v", spid, err)
	}
	select {
	case <-a.Lost():
		t.Logf("a noticed its session end after %s", time.Since(killed))
	case <-time.After(time.Second):
		t.Fatal("Lost not closed within a second of the KILL")
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("b's Lock: %v", err)
		}
		t.Logf("b got the lock %s after a's session was killed", time.Since(killed))
		if d := time.Since(killed); d > time.Second {
			t.Errorf("takeover took %s", d)
		}
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
		t.Fatalf("renew on a killed session: want ErrSessionLost, got %v", err)
	}
	// A stale token on a session that holds the lock: the lease is lost,
	// the session is not.
	if _, err := b.Renew(ctx, la.Token(), time.Minute); !errors.Is(err, sqlease.ErrLeaseLost) || errors.Is(err, sqlease.ErrSessionLost) {
		t.Fatalf("renew of a stale token: want ErrLeaseLost, got %v", err)
	}
	select {
	case <-b.Lost():
		t.Fatal("a stale token lost b's session")
	default:
	}
	if l, err := b.Renew(ctx, lb.Token(), time.Minute); err != nil || l.RenewedAt.Before(lb.RenewedAt) {
		t.Fatalf("renew of b's token: %+v %v", l, err)
	}
	if row, err := s.Lease(ctx, "adv"); err != nil || row.Holder != "holder-b" || row.Epoch != 2 {
		t.Fatalf("lease row: %+v %v", row, err)
	}
}

// A session whose lock was released behind its back — the connection
// still alive — is refused at its next renew with ErrSessionLost, leaves
// the row untouched, and its check closes Lost.
func TestAdvisoryRenewAfterLostLock(t *testing.T) {
	s, locker := newAdvisoryStore(t)
	ctx := t.Context()
	a := openAdvisory(t, locker, "adv")
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err := a.Takeover(ctx, "adv", "holder-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	if err := sqlserver.ReleaseBehindItsBack(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Renew(ctx, lease.Token(), time.Minute); !errors.Is(err, sqlease.ErrSessionLost) {
		t.Fatalf("renew after the session lost its lock: want ErrSessionLost, got %v", err)
	}
	select {
	case <-a.Lost():
		t.Logf("Lost closed %s after the release", time.Since(released))
	case <-time.After(time.Second):
		t.Fatal("Lost not closed within a second of losing the lock")
	}
	got, err := s.Lease(ctx, "adv")
	if err != nil || !got.RenewedAt.Equal(lease.RenewedAt) || got.Epoch != lease.Epoch {
		t.Fatalf("lease after the refused renew: %+v %v, want %+v", got, err, lease)
	}
}

// Lock gives up when its context ends, whether by deadline or by cancel,
// and Close frees the lock for a waiter at once.
func TestAdvisoryLockContext(t *testing.T) {
	_, locker := newAdvisoryStore(t)
	ctx := t.Context()
	a := openAdvisory(t, locker, "adv")
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}

	b := openAdvisory(t, locker, "adv")
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := b.Lock(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with a 300ms deadline: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("Lock with a 300ms deadline returned after %s", d)
	}

	c := openAdvisory(t, locker, "adv")
	cctx, cancelC := context.WithCancel(ctx)
	done := lockAsync(cctx, c)
	time.Sleep(200 * time.Millisecond)
	cancelled := time.Now()
	cancelC()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Lock: %v, want Canceled", err)
		}
		t.Logf("cancelled Lock returned after %s", time.Since(cancelled))
	case <-time.After(2 * time.Second):
		t.Fatal("cancelled Lock did not return")
	}

	d := openAdvisory(t, locker, "adv")
	waiting := lockAsync(ctx, d)
	time.Sleep(200 * time.Millisecond)
	closed := time.Now()
	if err := a.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-waiting:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the waiter got the lock %s after Close", time.Since(closed))
	case <-time.After(time.Second):
		t.Fatal("the waiter did not get the lock within a second of Close")
	}
	select {
	case <-a.Lost():
	default:
		t.Error("Lost not closed by Close")
	}
}

// Electors in advisory mode: one leads; when it stops, another leads at
// once — long before the lease (a minute) would expire — under the next
// epoch.
func TestAdvisoryElectorFailover(t *testing.T) {
	s, locker := newAdvisoryStore(t)
	var leaders atomic.Int32
	start := func(holder string) (*election.Elector, func()) {
		return storetest.RunElector(t, election.Config{Store: s, SessionLocker: locker, LeaseName: "adv", HolderID: holder,
			LeaseDuration: time.Minute, RenewInterval: 200 * time.Millisecond, AcquireInterval: 100 * time.Millisecond,
			OnStartedLeading: func(ctx context.Context, tok sqlease.Token) { leaders.Add(1); <-ctx.Done(); leaders.Add(-1) }})
	}
	a, stopA := start("a")
	waitFor(t, 10*time.Second, a.IsLeader)
	b, _ := start("b")
	time.Sleep(500 * time.Millisecond)
	if b.IsLeader() || leaders.Load() != 1 {
		t.Fatalf("leaders: %d", leaders.Load())
	}
	tokA, err := a.Require(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	stopA()
	waitFor(t, 5*time.Second, b.IsLeader)
	t.Logf("graceful handoff in advisory mode: %s", time.Since(stopped))
	tokB, err := b.Require(t.Context())
	if err != nil || tokB.Epoch != tokA.Epoch+1 {
		t.Fatalf("epochs %d -> %d (%v)", tokA.Epoch, tokB.Epoch, err)
	}
}

func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
