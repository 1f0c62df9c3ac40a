package storetest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/internal/syncbuf"
	"github.com/sqlease/sqlease/internal/waitfor"
	"github.com/sqlease/sqlease/sqlstore"
)

// AdvisoryFrozenHolder checks SPEC G5 in advisory mode for a dialect's
// session lock: a holder that keeps its session (and so the lock) but
// stops renewing — a frozen or cut-off process — is replaced within
// lease_duration + acquire_interval by a follower that acquires the
// expired lease (epoch + 1); once the frozen session ends, that follower
// wins the lock too and keeps its term. store and locker must share a table
// prefix; the lease name is "frozen".
func AdvisoryFrozenHolder(t *testing.T, store sqlease.LeaseStore, locker sqlease.SessionLocker) {
	const name = "frozen"
	// A lease of 1.5 s: with 800 ms, b's term once lapsed on a starved
	// machine (CI beside a bench at a higher priority) while the scenario
	// checked that it lasts.
	ttl, acquire := 1500*time.Millisecond, 200*time.Millisecond
	ctx := t.Context()
	frozen, old := lockedTerm(t, locker, name, "frozen-holder", ttl)
	tookAt := time.Now()

	// b's log, renewals included, for a failure's message: a term that
	// ended here (twice in ~16 loaded CI runs on PostgreSQL, never
	// reproduced) must say what its renewals through the lock did.
	var blog syncbuf.Buffer
	b, _ := RunElector(t, election.Config{Store: store, SessionLocker: locker, LeaseName: name, HolderID: "b",
		LeaseDuration: ttl, RenewInterval: 100 * time.Millisecond, AcquireInterval: acquire, AcquireJitter: -1,
		Logger:           slog.New(slog.NewTextHandler(&blog, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnStartedLeading: func(ctx context.Context, tok sqlease.Token) { <-ctx.Done() }})
	bound := ttl + acquire
	// The slack beyond the bound is for a busy machine (a test suite on
	// two cores), whose goroutines may wait their turn for a second or
	// more; the faults suites measure the bound between processes.
	waitCond(t, bound+5*time.Second, "b to lead while the frozen holder keeps the lock", b.IsLeader)
	took := time.Since(tookAt)
	t.Logf("frozen holder replaced %s after its last write (bound lease + acquire = %s)", took, bound)
	if took < ttl {
		t.Fatalf("b led %s after the frozen holder's takeover, before its lease of %s could expire", took, ttl)
	}
	if took > bound+3*time.Second {
		t.Errorf("b led %s after the frozen holder's last write, want about lease + acquire = %s", took, bound)
	}
	tok, err := b.Require(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Epoch != old.Epoch+1 {
		t.Fatalf("epochs %d -> %d", old.Epoch, tok.Epoch)
	}
	if at := b.PriorTermsEnd(tok); !at.IsZero() {
		t.Errorf("a lease acquired after it expired has PriorTermsEnd %s from now, want zero", time.Until(at))
	}
	// The frozen holder is fenced out by the epoch.
	if _, err := frozen.Renew(ctx, old.Token(), ttl); err == nil {
		t.Fatal("the frozen holder renewed a lease taken over")
	}

	// It wakes and lets go of the lock: b, waiting for it, keeps its term.
	// The term is what must last, not the gate: in advisory mode the gate
	// stays open only 2 renew intervals (200 ms here) past a renewal's
	// send, so on a starved machine a late renewal closes it for a moment
	// while the term goes on (fail-closed, as designed). CI saw exactly
	// that (Require failing with no leader_lost logged) when this loop
	// checked Require.
	if err := frozen.Close(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * ttl)
	lapses := 0
	for time.Now().Before(deadline) {
		if cur := b.Status().Token; cur != tok {
			// The term's end is logged when the renew in flight returns
			// (at the latest at the local deadline): wait for it.
			for end := time.Now().Add(ttl); time.Now().Before(end) && !strings.Contains(blog.String(), "leader_lost"); {
				time.Sleep(10 * time.Millisecond)
			}
			t.Fatalf("b's term ended after the frozen session closed (at %s): now %v; b's log:\n%s", time.Now().UTC().Format("15:04:05.000"), cur, blog.String())
		}
		if !b.IsLeader() {
			lapses++
		}
		time.Sleep(20 * time.Millisecond)
	}
	// And it still leads: the gate opens again with the next renewal
	// through the won lock.
	waitCond(t, 5*time.Second, "b's gate to be open after the frozen session closed", b.IsLeader)
	if cur, err := b.Require(ctx); err != nil || cur != tok {
		t.Fatalf("b leads with %v (%v), want its term %v", cur, err, tok)
	}
	if lapses > 0 {
		t.Logf("b's gate was closed at %d of its checks (late renewals on a busy machine), its term went on", lapses)
	}
}

// AdvisoryTakeoverWaitsForPriorTerm checks that a lock takeover of a lease
// that has not expired reports, through PriorTermsEnd, when the previous
// holder's lease will have expired: interrupted work must not be retried
// before it (SPEC G3).
func AdvisoryTakeoverWaitsForPriorTerm(t *testing.T, store sqlease.LeaseStore, locker sqlease.SessionLocker) {
	const name = "prior"
	ctx := t.Context()
	oldTTL := 3 * time.Second
	old, _ := lockedTerm(t, locker, name, "old-holder", oldTTL)
	b, stopB := RunElector(t, election.Config{Store: store, SessionLocker: locker, LeaseName: name, HolderID: "b",
		LeaseDuration: time.Second, RenewInterval: 100 * time.Millisecond, AcquireInterval: 100 * time.Millisecond,
		OnStartedLeading: func(ctx context.Context, tok sqlease.Token) { <-ctx.Done() }})
	// b has read the old lease while waiting for the lock; the old holder's
	// session ends (a crash, as the database sees it).
	waitCond(t, 5*time.Second, "b to observe the old lease", func() bool { return b.Status().LeaderKnown })
	if err := old.Close(ctx); err != nil {
		t.Fatal(err)
	}
	closed := time.Now()
	waitCond(t, 5*time.Second, "b to take over through the lock", b.IsLeader)
	if d := time.Since(closed); d > oldTTL/2 {
		t.Fatalf("b took over %s after the old session ended: not through the lock", d)
	}
	tok, _ := b.Require(ctx)
	left := time.Until(b.PriorTermsEnd(tok))
	// The old lease was renewed for 3s; it may run until then.
	if left < oldTTL-time.Second || left > oldTTL+100*time.Millisecond {
		t.Fatalf("PriorTermsEnd in %s after a takeover of a %s lease", left, oldTTL)
	}
	// b stops gracefully while the old term may still act: it frees the
	// lock but must not expire the row, or a follower acquiring it as
	// expired would have no prior term to wait for and could retry beside
	// the old holder (the model's finding F2).
	stopB()
	l, err := store.Lease(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if l.Holder != "b" || l.Expired() {
		t.Fatalf("after b's graceful stop within the old term's lease the row reads %s, expired %v: released too early", l.Token(), l.Expired())
	}
}

// lockedTerm opens a session of locker on the lease name (closed when t
// ends, if the scenario has not closed it), takes its lock and then the
// lease for holder for ttl: the term a scenario then freezes or ends.
func lockedTerm(t *testing.T, locker sqlease.SessionLocker, name, holder string, ttl time.Duration) (sqlease.SessionLock, sqlease.Lease) {
	t.Helper()
	sess := LockedSession(t, locker, name)
	l, err := sess.Takeover(t.Context(), name, holder, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return sess, l
}

// waitCond polls cond every 2 ms (waitfor.Cond) for at most d.
func waitCond(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	waitfor.Cond(t, d, 2*time.Millisecond, what, cond)
}

// AdvisoryTakeoverSparesLocklessTerm is the regression check of finding F1
// (model/README.md): winning the lock says that the lock's previous holder's
// session has ended, not that a term acquired without the lock has. A
// session that wins the lock must leave such a live term to expire
// (Takeover returns ErrLeaseHeld and changes nothing), take it over once it
// has expired, and depose at once a term that renewed through its own
// locked session. An elector that wins the lock waits the same way, and
// leads after that lease expires. store and locker must share a table
// prefix; the lease name is "lockless".
func AdvisoryTakeoverSparesLocklessTerm(t *testing.T, store sqlease.LeaseStore, locker sqlease.SessionLocker) {
	const name = "lockless"
	ttl := 1500 * time.Millisecond
	ctx := t.Context()
	open := func() sqlease.SessionLock { return LockedSession(t, locker, name) }
	// expired waits for the lease of the term named by who to expire.
	expired := func(who string) {
		t.Helper()
		waitCond(t, 3*ttl, who+" to expire", func() bool {
			cur, err := store.Lease(ctx, name)
			return err == nil && cur.Expired()
		})
	}
	// takeOver takes the lease over for holder through sess (what names
	// the term it ends), checks that the new epoch follows prev's, and
	// closes sess.
	takeOver := func(sess sqlease.SessionLock, holder string, prev sqlease.Lease, what string) {
		t.Helper()
		l, err := sess.Takeover(ctx, name, holder, ttl)
		if err != nil {
			t.Fatalf("Takeover of %s: %v", what, err)
		}
		if l.Epoch != prev.Epoch+1 {
			t.Fatalf("epochs %d -> %d", prev.Epoch, l.Epoch)
		}
		if err := sess.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// A term acquired without the lock, renewed by the store: live.
	b, err := store.Acquire(ctx, name, "b-lockless", ttl)
	if err != nil {
		t.Fatal(err)
	}
	c := open()
	if l, err := c.Takeover(ctx, name, "c", ttl); !errors.Is(err, sqlease.ErrLeaseHeld) {
		t.Fatalf("Takeover of a live lease acquired without the lock: %v, %v; want ErrLeaseHeld (finding F1)", l.Token(), err)
	}
	if cur, err := store.Lease(ctx, name); err != nil || cur.Token() != b.Token() || cur.Expired() {
		t.Fatalf("after a refused takeover the lease reads %v (expired %v), %v; want %v unchanged", cur.Token(), cur.Expired(), err, b.Token())
	}
	if _, err := store.Renew(ctx, b.Token(), ttl); err != nil {
		t.Fatalf("the lockless term could not renew after a refused takeover: %v", err)
	}
	// Once it has expired, the lock's winner takes it over.
	expired("the lockless lease")
	takeOver(c, "c", b, "the expired lease")

	// A term acquired without the lock that wins it later and renews
	// through its session is deposed like any locked term once that
	// session ends.
	expired("c's lease")
	d, err := store.Acquire(ctx, name, "d", ttl)
	if err != nil {
		t.Fatal(err)
	}
	ds := open()
	if _, err := ds.Renew(ctx, d.Token(), ttl); err != nil {
		t.Fatalf("renew of a lockless term through the session that won the lock: %v", err)
	}
	if err := ds.Close(ctx); err != nil {
		t.Fatal(err)
	}
	takeOver(open(), "e", d, "a live term renewed through its (now ended) locked session")

	// An elector that wins the lock while a lockless term renews waits
	// for that lease, then leads.
	expired("e's lease")
	f, err := store.Acquire(ctx, name, "f-lockless", ttl)
	if err != nil {
		t.Fatal(err)
	}
	el, _ := RunElector(t, election.Config{Store: store, SessionLocker: locker, LeaseName: name, HolderID: "g",
		LeaseDuration: ttl, RenewInterval: 200 * time.Millisecond, AcquireInterval: 100 * time.Millisecond, AcquireJitter: -1,
		OnStartedLeading: func(ctx context.Context, tok sqlease.Token) { <-ctx.Done() }})
	renewUntil := time.Now().Add(2 * ttl)
	for time.Now().Before(renewUntil) {
		if el.IsLeader() {
			t.Fatalf("g leads while the lockless term of %s renews (finding F1)", f.Token())
		}
		if _, err := store.Renew(ctx, f.Token(), ttl); err != nil {
			t.Fatalf("the lockless term lost its lease to g: %v (finding F1)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopped := time.Now()
	waitCond(t, 2*ttl+time.Second, "g to lead once the lockless lease expired", el.IsLeader)
	took := time.Since(stopped)
	t.Logf("g led %s after the lockless term's last renew (lease %s)", took, ttl)
	if took < ttl-200*time.Millisecond {
		t.Fatalf("g led %s after the last renew of a %s lease: before it expired", took, ttl)
	}
	tok, err := el.Require(ctx)
	if err != nil || tok.Epoch != f.Epoch+1 {
		t.Fatalf("g's term %v, %v; want epoch %d", tok, err, f.Epoch+1)
	}
}

// MigrateAddsLeaseLocked checks the upgrade of a leases table from before
// lease_locked (table prefix_leases of s): Migrate adds the column, existing
// rows read as not taken through the lock, and a second Migrate leaves it
// alone.
func MigrateAddsLeaseLocked(t *testing.T, s *sqlstore.Store, prefix string) {
	ctx := t.Context()
	if _, err := s.DB().ExecContext(ctx, "ALTER TABLE "+prefix+"_leases DROP COLUMN lease_locked"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "old", "h", time.Minute); err == nil {
		t.Fatal("Acquire worked on a table without lease_locked: the test does not test the upgrade")
	}
	for range 2 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	if _, err := s.Acquire(ctx, "old", "h", time.Minute); err != nil {
		t.Fatalf("Acquire after Migrate: %v", err)
	}
	var locked bool
	if err := s.DB().QueryRowContext(ctx, "SELECT lease_locked FROM "+prefix+"_leases WHERE lease_name = 'old'").Scan(&locked); err != nil || locked {
		t.Fatalf("lease_locked of a lease acquired through the store: %v, %v", locked, err)
	}
}

// AdvisoryLocklessTermTakesLock checks that a term acquired without the lock
// (its predecessor was frozen while holding it) takes the lock once the
// frozen session ends, even when a follower's Lock was queued before its
// own: the follower that wins the lock hands it over instead of keeping it
// while the term runs lock-less. Kept, every failover from that term waited
// for its lease to expire instead of the database noticing its session die
// (issue 31 item 7: 1.7–1.9 s instead of milliseconds after a freeze).
// store and locker must share a table prefix; the lease name is "handover".
func AdvisoryLocklessTermTakesLock(t *testing.T, store sqlease.LeaseStore, locker sqlease.SessionLocker) {
	const name = "handover"
	// Generous for a loaded machine: b's term must outlive its first
	// renewals through the session it just won.
	ttl := 2 * time.Second
	ctx := t.Context()
	frozen, _ := lockedTerm(t, locker, name, "frozen-holder", ttl)
	lead := func(ctx context.Context, tok sqlease.Token) { <-ctx.Done() }
	// c's Lock is queued first; it reads the lease too rarely to acquire it.
	var clog, blog syncbuf.Buffer
	c, _ := RunElector(t, election.Config{Store: store, SessionLocker: locker, LeaseName: name, HolderID: "c",
		LeaseDuration: ttl, RenewInterval: 200 * time.Millisecond, AcquireInterval: 30 * time.Second, AcquireJitter: -1,
		Logger: slog.New(slog.NewTextHandler(&clog, nil)), OnStartedLeading: lead})
	time.Sleep(300 * time.Millisecond)
	b, _ := RunElector(t, election.Config{Store: store, SessionLocker: locker, LeaseName: name, HolderID: "b",
		LeaseDuration: ttl, RenewInterval: 200 * time.Millisecond, AcquireInterval: 100 * time.Millisecond, AcquireJitter: -1,
		Logger: slog.New(slog.NewTextHandler(&blog, nil)), OnStartedLeading: lead})
	waitCond(t, ttl+3*time.Second, "b to lead without the lock", b.IsLeader)
	tok, err := b.Require(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(blog.String(), "leader_acquired_without_lock") {
		t.Fatalf("b led with the lock, not the case under test:\n%s", blog.String())
	}

	// The frozen holder wakes and lets go of the lock.
	closed := time.Now()
	if err := frozen.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitCond(t, 5*time.Second, "b's term to take the lock", func() bool { return strings.Contains(blog.String(), "leader_lock_won") })
	t.Logf("the lock reached the live term %s after the frozen session closed", time.Since(closed).Round(time.Millisecond))
	if cur, err := b.Require(ctx); err != nil || cur != tok {
		t.Fatalf("b's term ended: %v %v", cur, err)
	}
	if c.IsLeader() {
		t.Fatal("c leads beside b")
	}
	if !strings.Contains(clog.String(), "leader_takeover_deferred") {
		t.Logf("note: c never won the lock before b (its Lock was not served first)")
	}
}
