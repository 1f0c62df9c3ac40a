package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/mysql"
	"github.com/sqlease/sqlease/sqlstore"
	"github.com/sqlease/sqlease/storetest"
)

// newAdvisoryStore opens a store under a fresh prefix, which also gives the
// test lock names of its own.
func newAdvisoryStore(t *testing.T) (*sqlstore.Store, string) {
	t.Helper()
	prefix := randomPrefix(t)
	s, err := mysql.OpenStore(t.Context(), databaseURL(t), prefix)
	if err != nil {
		t.Fatalf("OpenStore: %v", err)
	}
	t.Cleanup(func() {
		defer s.DB().Close()
		if err := dropTables(s.DB(), prefix); err != nil {
			t.Errorf("drop tables of prefix %s: %v", prefix, err)
		}
	})
	return s, prefix
}

func newLocker(t *testing.T, prefix string) sqlease.SessionLocker {
	t.Helper()
	l, err := mysql.NewLocker(mysql.AdvisoryConfig{DSN: databaseURL(t), Prefix: prefix})
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

// killHolder ends the lock holder's server session from a third connection,
// as the server does when it sees a client die.
func killHolder(t *testing.T, db *sql.DB, lockName string) {
	t.Helper()
	var id sql.NullInt64
	if err := db.QueryRowContext(t.Context(), `SELECT IS_USED_LOCK(?)`, lockName).Scan(&id); err != nil || !id.Valid {
		t.Fatalf("find the holder of %s: %v %v", lockName, id, err)
	}
	if _, err := db.ExecContext(t.Context(), `KILL ?`, id.Int64); err != nil {
		t.Fatalf("KILL %d: %v", id.Int64, err)
	}
}

func TestLockName(t *testing.T) {
	if got := mysql.LockName("sqlease", "leader"); got != "sqlease:sqlease:leader" {
		t.Fatalf("LockName: %q", got)
	}
	long := mysql.LockName("sqlease", strings.Repeat("x", 100))
	upper := mysql.LockName("sqlease", "Leader")
	for _, n := range []string{long, upper} {
		if len(n) != 64 || !strings.HasPrefix(n, "sqlease:") || strings.Count(n, ":") != 1 {
			t.Fatalf("hashed lock name %q: want sqlease: and 56 hex digits", n)
		}
	}
	// Lock names are case insensitive, lease names are not.
	if upper == mysql.LockName("sqlease", "leader") || upper != mysql.LockName("sqlease", "Leader") {
		t.Fatal("lock names must be stable and tell leases apart by case")
	}
	if long == mysql.LockName("sqlease", strings.Repeat("x", 101)) {
		t.Fatal("long lease names must get distinct lock names")
	}
}

func TestAdvisoryBadConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  mysql.AdvisoryConfig
		want error
	}{
		{mysql.AdvisoryConfig{DSN: "mysql://u:p@127.0.0.1/db", Prefix: "Bad-Prefix"}, sqlease.ErrInvalidName},
		{mysql.AdvisoryConfig{DSN: "", Prefix: "sqlease"}, sqlease.ErrInvalidConfig},
		{mysql.AdvisoryConfig{DSN: "postgres://u:secret@127.0.0.1/db", Prefix: "sqlease"}, sqlease.ErrInvalidConfig},
		{mysql.AdvisoryConfig{DSN: "mysql://u:secret@127.0.0.1/db?parseTime=false", Prefix: "sqlease"}, sqlease.ErrInvalidConfig},
		{mysql.AdvisoryConfig{DSN: "mysql://u:p@127.0.0.1/db", Prefix: "sqlease", Key: strings.Repeat("k", 65)}, sqlease.ErrInvalidConfig},
	} {
		_, err := mysql.NewLocker(c.cfg)
		if !errors.Is(err, c.want) {
			t.Errorf("NewLocker(%+v): want %v, got %v", c.cfg, c.want, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("error shows the password: %v", err)
		}
	}
	l, err := mysql.NewLocker(mysql.AdvisoryConfig{DSN: "mysql://u:p@127.0.0.1/db", Prefix: "sqlease"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l(t.Context(), "bad name"); !errors.Is(err, sqlease.ErrInvalidName) {
		t.Fatalf("session for a bad lease name: want ErrInvalidName, got %v", err)
	}
}

// One session holds the lock; the next gets it as soon as the first closes.
func TestAdvisoryLockExcludesUntilClose(t *testing.T) {
	t.Parallel()
	_, prefix := newAdvisoryStore(t)
	locker := newLocker(t, prefix)
	a, b := openLock(t, locker), openLock(t, locker)
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

// The holder's server session is killed: its Lost closes without a poll, a
// follower blocked in Lock gets the lock at once and takes the unexpired
// lease over with the next epoch, fencing the old holder.
func TestAdvisoryKillTakeover(t *testing.T) {
	t.Parallel()
	s, prefix := newAdvisoryStore(t)
	locker := newLocker(t, prefix)
	ctx := t.Context()
	a, b := openLock(t, locker), openLock(t, locker)
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
	if err != nil || la.Epoch != 1 || la.Holder != "holder-a" || la.Remaining() != time.Minute {
		t.Fatalf("takeover of a new lease: %+v %v", la, err)
	}
	if l, err := a.Renew(ctx, la.Token(), time.Minute); err != nil || !l.RenewedAt.After(la.RenewedAt) || !l.AcquiredAt.Equal(la.AcquiredAt) {
		t.Fatalf("renew: %+v %v", l, err)
	}
	done := lockAsync(ctx, b)
	notLocked(t, done, 200*time.Millisecond)

	killed := time.Now()
	killHolder(t, s.DB(), mysql.LockName(prefix, "adv"))
	select {
	case <-a.Lost():
		t.Logf("a saw its session end %s after the KILL", time.Since(killed))
	case <-time.After(time.Second):
		t.Fatal("Lost not closed within a second of the KILL")
	}
	at := waitLocked(t, done, time.Second)
	t.Logf("b locked %s after the KILL", at.Sub(killed))

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
	if got, err := s.Lease(ctx, "adv"); err != nil || got.Token() != lb.Token() {
		t.Fatalf("lease after the takeover: %+v %v", got, err)
	}
	if err := a.Close(ctx); err != nil {
		t.Logf("Close of the killed session: %v", err)
	}
}

// Takeover bumps the epoch each time; a renew under an older epoch is
// refused with ErrLeaseLost and leaves the row alone; one under the current
// token extends it.
func TestAdvisoryRenewStaleToken(t *testing.T) {
	t.Parallel()
	s, prefix := newAdvisoryStore(t)
	ctx := t.Context()
	a := openLock(t, newLocker(t, prefix))
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
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

// Lock returns when its context ends; the aborted session is over, and
// leaves no trace that would keep the lock from the next session.
func TestAdvisoryLockHonoursContext(t *testing.T) {
	t.Parallel()
	_, prefix := newAdvisoryStore(t)
	locker := newLocker(t, prefix)
	a, b, c := openLock(t, locker), openLock(t, locker), openLock(t, locker)
	if err := a.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := b.Lock(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its deadline: want DeadlineExceeded, got %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Lock returned %s after a 200ms deadline", d)
	}
	select {
	case <-b.Lost():
	default:
		t.Fatal("the interrupted session must count as lost")
	}
	done := lockAsync(t.Context(), c)
	notLocked(t, done, 100*time.Millisecond)
	_ = a.Close(t.Context())
	waitLocked(t, done, time.Second)
}

// A holder that goes silent for a whole lease has its session ended by the
// server (wait_timeout, set by Takeover): its lock is freed.
func TestAdvisorySilentHolderEnded(t *testing.T) {
	t.Parallel()
	_, prefix := newAdvisoryStore(t)
	locker := newLocker(t, prefix)
	a, b := openLock(t, locker), openLock(t, locker)
	if err := a.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Takeover(t.Context(), "adv", "holder-a", 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	silent := time.Now()
	done := lockAsync(t.Context(), b)
	select {
	case <-a.Lost():
		t.Logf("the server ended the silent holder's session after %s", time.Since(silent))
	case <-time.After(5 * time.Second):
		t.Fatal("the silent holder's session was not ended")
	}
	waitLocked(t, done, time.Second)
}

// Electors in advisory mode: one leads; a graceful stop hands over at once;
// a killed session hands over at once too, long before the lease (a
// minute) would expire.
func TestAdvisoryElectorFailover(t *testing.T) {
	t.Parallel()
	s, prefix := newAdvisoryStore(t)
	locker := newLocker(t, prefix)
	var leaders atomic.Int32
	start := func(holder string) (*election.Elector, func()) {
		return storetest.RunElector(t, election.Config{Store: s, SessionLocker: locker, LeaseName: "adv", HolderID: holder,
			LeaseDuration: time.Minute, RenewInterval: 200 * time.Millisecond, AcquireInterval: 100 * time.Millisecond,
			OnStartedLeading: func(ctx context.Context, tok sqlease.Token) { leaders.Add(1); <-ctx.Done(); leaders.Add(-1) }})
	}
	a, stopA := start("a")
	waitUntil(t, 5*time.Second, a.IsLeader)
	b, _ := start("b")
	c, _ := start("c")
	time.Sleep(300 * time.Millisecond)
	if b.IsLeader() || c.IsLeader() || leaders.Load() != 1 {
		t.Fatalf("leaders: %d", leaders.Load())
	}
	tokA, _ := a.Require(t.Context())

	stopped := time.Now()
	stopA()
	var next *election.Elector
	waitUntil(t, 2*time.Second, func() bool {
		for _, e := range []*election.Elector{b, c} {
			if e.IsLeader() {
				next = e
				return true
			}
		}
		return false
	})
	t.Logf("graceful handoff: %s", time.Since(stopped))
	tokNext, _ := next.Require(t.Context())
	if tokNext.Epoch != tokA.Epoch+1 {
		t.Fatalf("epochs %d -> %d", tokA.Epoch, tokNext.Epoch)
	}

	killed := time.Now()
	killHolder(t, s.DB(), mysql.LockName(prefix, "adv"))
	var last sqlease.Token
	waitUntil(t, 2*time.Second, func() bool {
		for _, e := range []*election.Elector{b, c} {
			if tok, err := e.Require(context.Background()); err == nil && tok.Epoch > tokNext.Epoch {
				last = tok
				return true
			}
		}
		return false
	})
	t.Logf("%s leads %s after the leader's session was killed", last.Holder, time.Since(killed))
	if last.Epoch != tokNext.Epoch+1 {
		t.Fatalf("epochs %d -> %d", tokNext.Epoch, last.Epoch)
	}
	if err := next.Ensure(tokNext); !errors.Is(err, sqlease.ErrNotLeader) {
		t.Fatalf("the killed leader's token passed the gate: %v", err)
	}
	waitUntil(t, 2*time.Second, func() bool { return leaders.Load() == 1 })
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
