package storetest

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/sqlstore"
)

// AdvisoryDialect is a dialect's advisory mode (its session lock) as
// Advisory drives it: the table of scenarios runs over PostgreSQL, MySQL/
// MariaDB and SQL Server alike, in the manner of a driver test suite.
type AdvisoryDialect struct {
	// New opens a store under a prefix of its own (so lock names of its
	// own, dropped with the test) and a locker on its tables.
	New func(t *testing.T) (*sqlstore.Store, sqlease.SessionLocker, string)
	// Kill ends, from another connection of s, the server session of lock
	// (which holds the lock of lease), as the server does when its client
	// dies. Nil: KillHolder does.
	Kill func(t *testing.T, s *sqlstore.Store, prefix, lease string, lock sqlease.SessionLock)
	// KillHolder is Kill without the session at hand: it ends whichever
	// session holds the lock of lease. Nil: the scenarios that need it stop
	// before that step.
	KillHolder func(t *testing.T, s *sqlstore.Store, prefix, lease string)
	// Slack is how much a new lease's Remaining may fall short of the
	// duration asked for (0: it must be exact).
	Slack time.Duration
	// LockReturn bounds how long a Lock whose context has a 200 ms deadline
	// takes to return (default 1 s).
	LockReturn time.Duration
	// Handoff bounds a graceful handoff between electors (default 2 s).
	Handoff time.Duration
	// InterruptedLockLost: a Lock interrupted by its context ends the
	// session (Lost closes), as MySQL's does.
	InterruptedLockLost bool
	// Parallel runs the scenarios in parallel.
	Parallel bool
	// Skip names scenarios the dialect does not run, each with its reason.
	Skip map[string]string
}

// Advisory runs every advisory-mode scenario on a dialect, one subtest each.
func Advisory(t *testing.T, d AdvisoryDialect) {
	if d.LockReturn == 0 {
		d.LockReturn = time.Second
	}
	if d.Handoff == 0 {
		d.Handoff = 2 * time.Second
	}
	if d.Kill == nil {
		d.Kill = func(t *testing.T, s *sqlstore.Store, prefix, lease string, _ sqlease.SessionLock) {
			d.KillHolder(t, s, prefix, lease)
		}
	}
	scenarios := []struct {
		name string
		run  func(t *testing.T, d AdvisoryDialect)
	}{
		{"KillTakeover", advisoryKillTakeover},
		{"ElectorFailover", advisoryElectorFailover},
		{"LockExcludesUntilClose", advisoryLockExcludesUntilClose},
		{"LockContext", advisoryLockContext},
		{"RenewStaleToken", advisoryRenewStaleToken},
		{"FrozenHolder", onLocker(AdvisoryFrozenHolder)},
		{"TakeoverWaitsForPriorTerm", onLocker(AdvisoryTakeoverWaitsForPriorTerm)},
		{"TakeoverSparesLocklessTerm", onLocker(AdvisoryTakeoverSparesLocklessTerm)},
		{"LocklessTermTakesLock", onLocker(AdvisoryLocklessTermTakesLock)},
		{"MigrateAddsLeaseLocked", func(t *testing.T, d AdvisoryDialect) {
			s, _, prefix := d.New(t)
			MigrateAddsLeaseLocked(t, s, prefix)
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			if why, ok := d.Skip[sc.name]; ok {
				t.Skip(why)
			}
			if d.Parallel {
				t.Parallel()
			}
			sc.run(t, d)
		})
	}
}

// onLocker runs a scenario of a store and a locker on a store and locker of
// the dialect's own.
func onLocker(scenario func(*testing.T, sqlease.LeaseStore, sqlease.SessionLocker)) func(*testing.T, AdvisoryDialect) {
	return func(t *testing.T, d AdvisoryDialect) {
		s, l, _ := d.New(t)
		scenario(t, s, l)
	}
}

// OpenSession opens a session of locker on lease, closed when t ends.
func OpenSession(t *testing.T, locker sqlease.SessionLocker, lease string) sqlease.SessionLock {
	t.Helper()
	l, err := locker(t.Context(), lease)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

// LockedSession is OpenSession's session once it holds its lock.
func LockedSession(t *testing.T, locker sqlease.SessionLocker, lease string) sqlease.SessionLock {
	t.Helper()
	l := OpenSession(t, locker, lease)
	if err := l.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	return l
}

// lockAsync runs Lock in the background and reports when it returns.
func lockAsync(ctx context.Context, l sqlease.SessionLock) chan error {
	done := make(chan error, 1)
	go func() { done <- l.Lock(ctx) }()
	return done
}

func waitLocked(t *testing.T, done chan error, within time.Duration) time.Time {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
		return time.Now()
	case <-time.After(within):
		t.Fatalf("Lock did not return within %s", within)
		return time.Time{}
	}
}

func notLocked(t *testing.T, done chan error, during time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("Lock returned (%v) while another session holds the lock", err)
	case <-time.After(during):
	}
}

// advisoryKillTakeover: two sessions exclude each other, another lease's
// lock is another lock; when the holder's server session is killed, as a
// crash would end it, its Lost closes without a poll and the waiting session
// gets the lock, both within a second; the waiter takes the unexpired lease
// over with the next epoch, fencing the old holder, whose session refuses
// renew and takeover. A stale token on a live session loses the lease, not
// the session.
func advisoryKillTakeover(t *testing.T, d AdvisoryDialect) {
	s, locker, prefix := d.New(t)
	ctx := t.Context()
	a, b := OpenSession(t, locker, "adv"), OpenSession(t, locker, "adv")
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
	if err != nil || la.Epoch != 1 || la.Holder != "holder-a" || la.Remaining() > time.Minute || la.Remaining() < time.Minute-d.Slack {
		t.Fatalf("takeover of a new lease: %+v %v", la, err)
	}
	if l, err := a.Renew(ctx, la.Token(), time.Minute); err != nil || !l.RenewedAt.After(la.RenewedAt) || !l.AcquiredAt.Equal(la.AcquiredAt) {
		t.Fatalf("renew through the session: %+v %v", l, err)
	}
	done := lockAsync(ctx, b)
	notLocked(t, done, 300*time.Millisecond)
	// Another lease's lock is another lock.
	other := OpenSession(t, locker, "adv2")
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := other.Lock(octx); err != nil {
		t.Fatalf("lock of another lease: %v", err)
	}

	killed := time.Now()
	d.Kill(t, s, prefix, "adv", a)
	select {
	case <-a.Lost():
		t.Logf("a saw its session end %s after the kill", time.Since(killed))
	case <-time.After(time.Second):
		t.Fatal("Lost not closed within a second of the kill")
	}
	at := waitLocked(t, done, time.Second)
	t.Logf("b locked %s after the kill", at.Sub(killed))

	// The lease has a minute left: b takes it over anyway.
	lb, err := b.Takeover(ctx, "adv", "holder-b", time.Minute)
	if err != nil || lb.Epoch != 2 || lb.Holder != "holder-b" {
		t.Fatalf("takeover of an unexpired lease: %+v %v", lb, err)
	}
	if err := s.Fenced(ctx, la.Token(), func(*sql.Tx) error { return nil }); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("the old holder's fence: want ErrLeaseLost, got %v", err)
	}
	if _, err := a.Renew(ctx, la.Token(), time.Minute); !errors.Is(err, sqlease.ErrSessionLost) {
		t.Fatalf("renew on the killed session: want ErrSessionLost, got %v", err)
	}
	if _, err := a.Takeover(ctx, "adv", "holder-a", time.Minute); !errors.Is(err, sqlease.ErrSessionLost) {
		t.Fatalf("takeover on the killed session: want ErrSessionLost, got %v", err)
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
	if got, err := s.Lease(ctx, "adv"); err != nil || got.Holder != "holder-b" || got.Epoch != 2 {
		t.Fatalf("lease after the takeover: %+v %v", got, err)
	}
	if err := a.Close(ctx); err != nil {
		t.Logf("Close of the killed session: %v", err)
	}
}

// advisoryElectorFailover: electors in advisory mode; one leads; a graceful
// stop hands over at once; a killed session hands over at once too, long
// before the lease (a minute) would expire, under the next epoch, and the
// killed leader's token no longer passes the gate.
func advisoryElectorFailover(t *testing.T, d AdvisoryDialect) {
	s, locker, prefix := d.New(t)
	var leaders atomic.Int32
	start := func(holder string) (*election.Elector, func()) {
		return RunElector(t, election.Config{Store: s, SessionLocker: locker, LeaseName: "adv", HolderID: holder,
			LeaseDuration: time.Minute, RenewInterval: 200 * time.Millisecond, AcquireInterval: 100 * time.Millisecond,
			OnStartedLeading: func(ctx context.Context, tok sqlease.Token) { leaders.Add(1); <-ctx.Done(); leaders.Add(-1) }})
	}
	a, stopA := start("a")
	waitCond(t, 10*time.Second, "a leads", a.IsLeader)
	b, _ := start("b")
	c, _ := start("c")
	time.Sleep(500 * time.Millisecond)
	if b.IsLeader() || c.IsLeader() || leaders.Load() != 1 {
		t.Fatalf("leaders: %d", leaders.Load())
	}
	tokA, err := a.Require(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	stopped := time.Now()
	stopA()
	var next *election.Elector
	waitCond(t, d.Handoff, "another leader after a graceful stop", func() bool {
		for _, e := range []*election.Elector{b, c} {
			if e.IsLeader() {
				next = e
				return true
			}
		}
		return false
	})
	t.Logf("graceful handoff: %s", time.Since(stopped))
	tokNext, err := next.Require(t.Context())
	if err != nil || tokNext.Epoch != tokA.Epoch+1 {
		t.Fatalf("epochs %d -> %d (%v)", tokA.Epoch, tokNext.Epoch, err)
	}
	if d.KillHolder == nil {
		return
	}

	killed := time.Now()
	d.KillHolder(t, s, prefix, "adv")
	NextTerm(t, 2*time.Second, killed, "the leader's session was killed", next, tokNext, b, c)
	waitCond(t, 2*time.Second, "one leader", func() bool { return leaders.Load() == 1 })
}

// advisoryLockExcludesUntilClose: one session holds the lock; the next gets
// it as soon as the first closes, and the closed one's Lost is closed.
func advisoryLockExcludesUntilClose(t *testing.T, d AdvisoryDialect) {
	_, locker, _ := d.New(t)
	a, b := OpenSession(t, locker, "adv"), OpenSession(t, locker, "adv")
	if err := a.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	done := lockAsync(t.Context(), b)
	notLocked(t, done, 300*time.Millisecond)
	closed := time.Now()
	if err := a.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-a.Lost():
	default:
		t.Fatal("Lost still open after Close")
	}
	at := waitLocked(t, done, time.Second)
	t.Logf("b locked %s after a closed", at.Sub(closed))
}

// advisoryLockContext: Lock gives up when its context ends, by deadline or
// by cancel (the interrupted session counts as lost where the dialect says
// so) and leaves no trace that would keep the lock from the next session.
func advisoryLockContext(t *testing.T, d AdvisoryDialect) {
	_, locker, _ := d.New(t)
	ctx := t.Context()
	a := LockedSession(t, locker, "adv")

	b := OpenSession(t, locker, "adv")
	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := b.Lock(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its deadline: want DeadlineExceeded, got %v", err)
	}
	if took := time.Since(start); took > d.LockReturn {
		t.Fatalf("Lock returned %s after a 200ms deadline, want ≤ %s", took, d.LockReturn)
	}
	if d.InterruptedLockLost {
		select {
		case <-b.Lost():
		default:
			t.Fatal("the interrupted session must count as lost")
		}
	}

	c := OpenSession(t, locker, "adv")
	cctx, cancelC := context.WithCancel(ctx)
	cancelled := lockAsync(cctx, c)
	time.Sleep(200 * time.Millisecond)
	at := time.Now()
	cancelC()
	select {
	case err := <-cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Lock: %v, want Canceled", err)
		}
		t.Logf("cancelled Lock returned after %s", time.Since(at))
	case <-time.After(2 * time.Second):
		t.Fatal("cancelled Lock did not return")
	}

	e := OpenSession(t, locker, "adv")
	done := lockAsync(ctx, e)
	notLocked(t, done, 200*time.Millisecond)
	closed := time.Now()
	if err := a.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	t.Logf("the waiter got the lock %s after Close", waitLocked(t, done, time.Second).Sub(closed))
	select {
	case <-a.Lost():
	default:
		t.Error("Lost not closed by Close")
	}
}

// advisoryRenewStaleToken: Takeover bumps the epoch each time; a renew
// under an older epoch, or by another holder, is refused with ErrLeaseLost
// and leaves the row and the session alone; one under the current token
// extends it.
func advisoryRenewStaleToken(t *testing.T, d AdvisoryDialect) {
	s, locker, _ := d.New(t)
	ctx := t.Context()
	a := LockedSession(t, locker, "adv")
	l1, err := a.Takeover(ctx, "adv", "holder-a", time.Minute)
	if err != nil || l1.Epoch != 1 {
		t.Fatalf("first takeover: %+v %v", l1, err)
	}
	l2, err := a.Takeover(ctx, "adv", "holder-a", time.Minute)
	if err != nil || l2.Epoch != 2 {
		t.Fatalf("second takeover: %+v %v", l2, err)
	}
	if _, err := a.Renew(ctx, l1.Token(), time.Minute); !errors.Is(err, sqlease.ErrLeaseLost) || errors.Is(err, sqlease.ErrSessionLost) {
		t.Fatalf("renew with a stale token: want ErrLeaseLost, got %v", err)
	}
	other := l2.Token()
	other.Holder = "holder-b"
	if _, err := a.Renew(ctx, other, time.Minute); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("renew with another holder: want ErrLeaseLost, got %v", err)
	}
	if got, err := s.Lease(ctx, "adv"); err != nil || !got.RenewedAt.Equal(l2.RenewedAt) {
		t.Fatalf("lease after refused renews: %+v %v", got, err)
	}
	if _, err := a.Renew(ctx, l2.Token(), time.Minute); err != nil {
		t.Fatalf("renew with the current token: %v", err)
	}
	select {
	case <-a.Lost():
		t.Fatal("a refused renew ended the session")
	default:
	}
}
