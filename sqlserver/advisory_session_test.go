package sqlserver

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
)

// These tests run a session on a scripted stand-in for SQL Server (a
// database/sql driver that answers the advisory statements by their text):
// they check the session's own logic — the lock loop, the checks, Lost,
// serialisation, Close — not the T-SQL, which only a server can.

type fakeServer struct {
	q advisorySQL

	mu       sync.Mutex
	codes    []int  // sp_getapplock return codes to give, in order; then wait and time out
	mode     string // APPLOCK_MODE of the session
	holdsErr error  // error for the lock check
	renewOK  bool   // the lease row matches the token
	// unlockedTerm: the lease is live and was acquired without the lock
	unlockedTerm bool
	stall        bool // lock checks wait for their context
	// otherSession: lock checks run on a session without the lock
	otherSession bool
	calls        []string
	timeouts     []int64 // @LockTimeout of each lock request
	closed       bool

	inflight, maxInflight atomic.Int32
}

func (f *fakeServer) Connect(context.Context) (driver.Conn, error) { return &fakeConn{f}, nil }
func (f *fakeServer) Driver() driver.Driver                        { return nil }

func (f *fakeServer) set(fn func(f *fakeServer)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeServer) count(call string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c == call {
			n++
		}
	}
	return n
}

type fakeConn struct{ f *fakeServer }

func (c *fakeConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("fake: no prepare") }
func (c *fakeConn) Begin() (driver.Tx, error)           { return nil, errors.New("fake: no transactions") }
func (c *fakeConn) Close() error {
	c.f.set(func(f *fakeServer) { f.closed = true })
	return nil
}

func (c *fakeConn) statement(query string) string {
	switch query {
	case c.f.q.lock:
		return "lock"
	case c.f.q.holds:
		return "holds"
	case c.f.q.takeover:
		return "takeover"
	case c.f.q.renew:
		return "renew"
	case c.f.q.release:
		return "release"
	}
	return "unknown"
}

func (c *fakeConn) enter(name string) func() {
	if n := c.f.inflight.Add(1); n > c.f.maxInflight.Load() {
		c.f.maxInflight.Store(n)
	}
	c.f.set(func(f *fakeServer) { f.calls = append(f.calls, name) })
	time.Sleep(time.Millisecond) // long enough for overlaps to show
	return func() { c.f.inflight.Add(-1) }
}

func (c *fakeConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	name := c.statement(query)
	defer c.enter(name)()
	if name != "release" {
		return nil, errors.New("fake: unexpected exec of " + name)
	}
	c.f.set(func(f *fakeServer) { f.mode = "NoLock" })
	return driver.RowsAffected(0), nil
}

func (c *fakeConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	name := c.statement(query)
	defer c.enter(name)()
	f := c.f
	f.mu.Lock()
	mode, holdsErr, renewOK, stall, unlocked := f.mode, f.holdsErr, f.renewOK, f.stall, f.unlockedTerm
	if f.otherSession && name == "holds" {
		mode = "NoLock"
	}
	f.mu.Unlock()
	now := time.Date(2026, 5, 4, 12, 0, 0, 0, time.FixedZone("X", 3600))
	switch name {
	case "lock":
		ms := args[1].Value.(int64)
		f.mu.Lock()
		f.timeouts = append(f.timeouts, ms)
		code, scripted := -1, len(f.codes) > 0
		if scripted {
			code, f.codes = f.codes[0], f.codes[1:]
			if code >= 0 {
				f.mode = exclusive
			}
		}
		f.mu.Unlock()
		if !scripted {
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return &fakeRows{cols: []string{""}, rows: [][]driver.Value{{int64(code)}}}, nil
	case "holds":
		if stall {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		if holdsErr != nil {
			return nil, holdsErr
		}
		return &fakeRows{cols: []string{""}, rows: [][]driver.Value{{mode}}}, nil
	case "takeover":
		if mode != exclusive || unlocked {
			return &fakeRows{cols: make([]string, 5)}, nil
		}
		return &fakeRows{cols: make([]string, 5), rows: [][]driver.Value{{int64(4), now, now, now.Add(time.Minute), now}}}, nil
	case "renew":
		if mode != exclusive || !renewOK {
			return &fakeRows{cols: make([]string, 4)}, nil
		}
		return &fakeRows{cols: make([]string, 4), rows: [][]driver.Value{{now, now, now.Add(time.Minute), now}}}, nil
	}
	return nil, errors.New("fake: unexpected query " + name)
}

type fakeRows struct {
	cols []string
	rows [][]driver.Value
}

func (r *fakeRows) Columns() []string { return r.cols }
func (r *fakeRows) Close() error      { return nil }
func (r *fakeRows) Next(dest []driver.Value) error {
	if len(r.rows) == 0 {
		return io.EOF
	}
	copy(dest, r.rows[0])
	r.rows = r.rows[1:]
	return nil
}

// fakeLock opens a session on a fake server.
func fakeLock(t *testing.T, f *fakeServer, interval time.Duration) *session {
	t.Helper()
	f.q = advQueries(t)
	db := sql.OpenDB(f)
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(db, conn, 51, "adv", LockResource(advPrefix, "adv"), interval, f.q)
	s.answerWithin = 200 * time.Millisecond
	t.Cleanup(func() {
		_ = s.Close(context.Background())
		if m := f.maxInflight.Load(); m > 1 {
			t.Errorf("%d statements ran on the connection at once", m)
		}
	})
	return s
}

func waitLost(t *testing.T, s *session, within time.Duration) {
	t.Helper()
	select {
	case <-s.Lost():
		return
	default:
	}
	select {
	case <-s.Lost():
	case <-time.After(within):
		t.Fatalf("Lost not closed within %s", within)
	}
}

func notLost(t *testing.T, s *session) {
	t.Helper()
	select {
	case <-s.Lost():
		t.Fatalf("Lost closed: %v", s.lostErr())
	default:
	}
}

// Lock repeats bounded waits until granted, then checks; Close releases
// the lock and closes the connection.
func TestSessionLockAndClose(t *testing.T) {
	f := &fakeServer{codes: []int{-1, -1, 1}, renewOK: true}
	s := fakeLock(t, f, time.Hour)
	if err := s.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.count("lock") != 3 || f.count("holds") != 1 {
		t.Fatalf("calls %v, want 3 lock requests and a check", f.calls)
	}
	for _, ms := range f.timeouts {
		if ms != lockWait.Milliseconds() {
			t.Errorf("@LockTimeout %d, want %d", ms, lockWait.Milliseconds())
		}
	}
	if err := s.Lock(context.Background()); err != nil || f.count("lock") != 3 {
		t.Errorf("a second Lock: %v, %d requests", err, f.count("lock"))
	}
	l, err := s.Takeover(context.Background(), "adv", "h", time.Minute)
	if err != nil || l.Epoch != 4 || l.Holder != "h" || l.ExpiresAt.Location() != time.UTC || l.ExpiresAt.Sub(l.ObservedAt) != time.Minute {
		t.Fatalf("Takeover = %+v, %v", l, err)
	}
	if _, err := s.Renew(context.Background(), l.Token(), time.Minute); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	notLost(t, s)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.count("release") != 1 || !f.closed {
		t.Errorf("Close: calls %v, closed %v; want a release and the connection closed", f.calls, f.closed)
	}
	waitLost(t, s, 0)
	if err := s.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// Lock honours its context: no request waits past the deadline.
func TestSessionLockDeadline(t *testing.T) {
	f := &fakeServer{}
	s := fakeLock(t, f, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := s.Lock(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("Lock = %v after %s, want DeadlineExceeded after about 150ms", err, time.Since(start))
	}
	for _, ms := range f.timeouts {
		if ms > 150 {
			t.Errorf("@LockTimeout %d beyond the deadline", ms)
		}
	}
	// Cancelled mid-wait, too.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start = time.Now()
	if err := s.Lock(ctx); !errors.Is(err, context.Canceled) || time.Since(start) > time.Second {
		t.Fatalf("Lock = %v after %s, want Canceled after about 50ms", err, time.Since(start))
	}
}

// A failed sp_getapplock is an error, not a wait.
func TestSessionLockFails(t *testing.T) {
	for _, code := range []int{-2, -3, -999} {
		f := &fakeServer{codes: []int{-1, code}}
		s := fakeLock(t, f, time.Hour)
		if err := s.Lock(context.Background()); err == nil || f.count("lock") != 2 {
			t.Errorf("code %d: Lock = %v after %d requests", code, err, f.count("lock"))
		}
	}
}

// A lock granted to the request but not held by the session, as through a
// pooler that hands the check to another session, is refused.
func TestSessionLockPooler(t *testing.T) {
	f := &fakeServer{codes: []int{0}, otherSession: true}
	s := fakeLock(t, f, time.Hour)
	err := s.Lock(context.Background())
	if !errors.Is(err, sqlease.ErrSessionLost) || !strings.Contains(err.Error(), "pooler") {
		t.Fatalf("Lock = %v, want ErrSessionLost naming a pooler", err)
	}
	waitLost(t, s, 0)
}

// The watcher closes Lost when the lock is gone, when the check fails, and
// when it goes unanswered.
func TestSessionWatcher(t *testing.T) {
	for _, tc := range []struct {
		name   string
		breakf func(f *fakeServer)
	}{
		{"lock gone", func(f *fakeServer) { f.mode = "NoLock" }},
		{"connection dead", func(f *fakeServer) { f.holdsErr = io.EOF }},
		{"no answer", func(f *fakeServer) { f.stall = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeServer{codes: []int{0}, renewOK: true}
			s := fakeLock(t, f, 10*time.Millisecond)
			if err := s.Lock(context.Background()); err != nil {
				t.Fatal(err)
			}
			// The watcher checks again and again (on a busy machine a
			// 10 ms interval may stretch: wait for three checks, not for
			// a time), and the lock stays held meanwhile.
			for deadline := time.Now().Add(10 * time.Second); f.count("holds") < 3; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d checks in 10 s at a 10ms interval", f.count("holds"))
				}
			}
			notLost(t, s)
			broke := time.Now()
			f.set(tc.breakf)
			waitLost(t, s, 10*time.Second)
			t.Logf("Lost after %s", time.Since(broke))
			if _, err := s.Renew(context.Background(), sqlease.Token{Name: "adv", Holder: "h", Epoch: 1}, time.Minute); !errors.Is(err, sqlease.ErrSessionLost) {
				t.Errorf("Renew after Lost: %v", err)
			}
			start := time.Now()
			if err := s.Close(context.Background()); err != nil || time.Since(start) > time.Second {
				t.Errorf("Close = %v after %s", err, time.Since(start))
			}
			if !f.closed {
				t.Error("Close left the connection open")
			}
		})
	}
}

// Renew tells a lost lease from a lost lock.
func TestSessionRenew(t *testing.T) {
	f := &fakeServer{codes: []int{0}}
	s := fakeLock(t, f, time.Hour)
	if err := s.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	tok := sqlease.Token{Name: "adv", Holder: "h", Epoch: 2}
	if _, err := s.Renew(context.Background(), tok, time.Minute); !errors.Is(err, sqlease.ErrLeaseLost) || errors.Is(err, sqlease.ErrSessionLost) {
		t.Fatalf("Renew of a stale token: %v, want ErrLeaseLost", err)
	}
	notLost(t, s)
	f.set(func(f *fakeServer) { f.mode = "NoLock"; f.renewOK = true })
	if _, err := s.Renew(context.Background(), tok, time.Minute); !errors.Is(err, sqlease.ErrSessionLost) {
		t.Fatalf("Renew without the lock: %v, want ErrSessionLost", err)
	}
	waitLost(t, s, 0)
	if _, err := s.Takeover(context.Background(), "adv", "h", time.Minute); !errors.Is(err, sqlease.ErrSessionLost) {
		t.Fatalf("Takeover without the lock: %v, want ErrSessionLost", err)
	}
}

// Takeover without the lock finds nothing to merge: ErrSessionLost.
func TestSessionTakeoverWithoutLock(t *testing.T) {
	f := &fakeServer{}
	s := fakeLock(t, f, time.Hour)
	if _, err := s.Takeover(context.Background(), "adv", "h", time.Minute); !errors.Is(err, sqlease.ErrSessionLost) {
		t.Fatalf("Takeover before Lock: %v, want ErrSessionLost", err)
	}
}

// A takeover that merges nothing while the session holds the lock met a
// live lease acquired without the lock (finding F1): ErrLeaseHeld, and the
// session stays usable.
func TestSessionTakeoverOfLocklessTerm(t *testing.T) {
	f := &fakeServer{codes: []int{0}, unlockedTerm: true}
	s := fakeLock(t, f, time.Hour)
	if err := s.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Takeover(context.Background(), "adv", "h", time.Minute); !errors.Is(err, sqlease.ErrLeaseHeld) {
		t.Fatalf("Takeover of a live lockless term: %v, want ErrLeaseHeld", err)
	}
	notLost(t, s)
	f.set(func(f *fakeServer) { f.unlockedTerm = false })
	if l, err := s.Takeover(context.Background(), "adv", "h", time.Minute); err != nil || l.Epoch != 4 {
		t.Fatalf("Takeover once the term expired: %v, %v", l, err)
	}
}

// Statements never overlap on the connection, whoever sends them.
func TestSessionSerialises(t *testing.T) {
	f := &fakeServer{codes: []int{0}, renewOK: true}
	s := fakeLock(t, f, time.Millisecond)
	if err := s.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				if _, err := s.Renew(context.Background(), sqlease.Token{Name: "adv", Holder: "h", Epoch: 1}, time.Minute); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if m := f.maxInflight.Load(); m != 1 {
		t.Errorf("%d statements at once", m)
	}
}

// Close gives up on a clean release when its context ends, and closes the
// connection anyway.
func TestSessionCloseStuck(t *testing.T) {
	f := &fakeServer{codes: []int{0}}
	s := fakeLock(t, f, 5*time.Millisecond)
	s.answerWithin = time.Hour // the check hangs instead of failing
	if err := s.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.set(func(f *fakeServer) { f.stall = true })
	time.Sleep(30 * time.Millisecond) // a check is now stuck
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_ = s.Close(ctx)
	if time.Since(start) > time.Second {
		t.Fatalf("Close took %s", time.Since(start))
	}
	waitLost(t, s, 0)
	deadline := time.Now().Add(time.Second)
	for {
		f.mu.Lock()
		closed := f.closed
		f.mu.Unlock()
		if closed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the connection was not closed")
		}
		time.Sleep(time.Millisecond)
	}
	if f.count("release") != 0 {
		t.Error("released although the session was busy")
	}
}
