package election_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/storetest"
)

// fakeLocks is an in-memory session lock service: one lock, handed to the
// sessions in Lock order, and a lease epoch. Renew can be stalled to play a
// slow heartbeat; Kill ends the holder's session.
type fakeLocks struct {
	token chan struct{} // holds a value while the lock is free
	mu    sync.Mutex
	epoch int64
	stall chan struct{} // non-nil: renews wait until it is closed
	cur   *fakeSession
}

func newFakeLocks() *fakeLocks {
	f := &fakeLocks{token: make(chan struct{}, 1)}
	f.token <- struct{}{}
	return f
}

type fakeSession struct {
	f      *fakeLocks
	held   bool
	lost   chan struct{}
	closed sync.Once
}

func (f *fakeLocks) locker(ctx context.Context, name string) (sqlease.SessionLock, error) {
	return &fakeSession{f: f, lost: make(chan struct{})}, nil
}

func (s *fakeSession) Lock(ctx context.Context) error {
	select {
	case <-s.f.token:
		s.held = true
		s.f.mu.Lock()
		s.f.cur = s
		s.f.mu.Unlock()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *fakeSession) Takeover(ctx context.Context, name, holder string, ttl time.Duration) (sqlease.Lease, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.epoch++
	now := time.Now()
	return sqlease.Lease{Name: name, Holder: holder, Epoch: s.f.epoch, AcquiredAt: now, RenewedAt: now, ExpiresAt: now.Add(ttl), ObservedAt: now}, nil
}

func (s *fakeSession) Renew(ctx context.Context, tok sqlease.Token, ttl time.Duration) (sqlease.Lease, error) {
	s.f.mu.Lock()
	stall, epoch := s.f.stall, s.f.epoch
	s.f.mu.Unlock()
	if stall != nil {
		select {
		case <-stall:
		case <-ctx.Done():
			return sqlease.Lease{}, ctx.Err()
		}
	}
	select {
	case <-s.lost:
		return sqlease.Lease{}, sqlease.ErrSessionLost
	default:
	}
	if epoch != tok.Epoch {
		return sqlease.Lease{}, sqlease.ErrLeaseLost
	}
	now := time.Now()
	return sqlease.Lease{Name: tok.Name, Holder: tok.Holder, Epoch: tok.Epoch, RenewedAt: now, ExpiresAt: now.Add(ttl), ObservedAt: now}, nil
}

func (s *fakeSession) Lost() <-chan struct{} { return s.lost }

func (s *fakeSession) Close(ctx context.Context) error {
	s.closed.Do(func() {
		close(s.lost)
		if s.held {
			s.f.token <- struct{}{}
		}
	})
	return nil
}

// kill ends the current holder's session, as the database does when it sees
// the holder's connection die.
func (f *fakeLocks) kill() {
	f.mu.Lock()
	s := f.cur
	f.mu.Unlock()
	s.Close(context.Background())
}

func advisory(t *testing.T, f *fakeLocks, holder string) (*election.Elector, chan context.Context) {
	t.Helper()
	leadCtx := make(chan context.Context, 4)
	cfg := fast(dbtest.SQLite(t), holder)
	cfg.SessionLocker = f.locker
	cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin = 5*time.Second, 50*time.Millisecond, 500*time.Millisecond
	cfg.OnStartedLeading = func(ctx context.Context, tok sqlease.Token) { leadCtx <- ctx; <-ctx.Done() }
	e, _ := storetest.RunElector(t, cfg)
	return e, leadCtx
}

// The heartbeat watchdog: late heartbeats (2× the interval) close the gate
// although the lock is held, and a heartbeat that succeeds re-opens it, in
// the same term.
func TestAdvisoryWatchdogClosesAndReopensGate(t *testing.T) {
	f := newFakeLocks()
	e, leadCtx := advisory(t, f, "a")
	dbtest.WaitFor(t, 5*time.Second, "leadership", e.IsLeader)
	tok, _ := e.Require(context.Background())
	ctx := <-leadCtx

	stall := make(chan struct{})
	f.mu.Lock()
	f.stall = stall
	f.mu.Unlock()
	stalledAt := time.Now()
	dbtest.WaitFor(t, 2*time.Second, "the watchdog to close the gate", func() bool { return !e.IsLeader() })
	if d := time.Since(stalledAt); d > 500*time.Millisecond {
		t.Fatalf("gate closed %s after heartbeats stalled, want about 2 intervals (100ms)", d)
	}
	if err := e.Healthy(); err == nil {
		t.Fatal("a leader whose heartbeats are late must report unhealthy")
	}
	f.mu.Lock()
	f.stall = nil
	f.mu.Unlock()
	close(stall)
	dbtest.WaitFor(t, 2*time.Second, "the gate to re-open", e.IsLeader)
	if now, _ := e.Require(context.Background()); now != tok {
		t.Fatalf("re-opened under %v, want the same term %v", now, tok)
	}
	if ctx.Err() != nil {
		t.Fatal("a late heartbeat ended the term; the watchdog only closes the gate")
	}
}

// The holder's session ends (the database saw its connection die): its gate
// closes at once and whoever locks next — the waiting follower, or the old
// holder's own next session — leads with epoch + 1.
func TestAdvisorySessionLostHandsOver(t *testing.T) {
	f := newFakeLocks()
	a, aCtx := advisory(t, f, "a")
	dbtest.WaitFor(t, 5*time.Second, "a to lead", a.IsLeader)
	b, _ := advisory(t, f, "b")
	tokA, _ := a.Require(context.Background())
	ctx := <-aCtx
	killed := time.Now()
	f.kill()
	dbtest.WaitFor(t, 2*time.Second, "a's term to end", func() bool { return ctx.Err() != nil })
	storetest.NextTerm(t, 2*time.Second, killed, "a's session ended", a, tokA, a, b)
}
