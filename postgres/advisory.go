package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/sqlease/sqlease"
)

// LockKey derives the 64-bit advisory lock key of a scope string (FNV-1a).
func LockKey(scope string) int64 {
	h := fnv.New64a()
	h.Write([]byte(scope))
	return int64(h.Sum64())
}

// DefaultLockScope is the scope whose LockKey a lease's advisory lock uses
// unless a key is given: it names the table prefix and the lease, so that
// two leases (or two deployments sharing a database) never share a lock.
func DefaultLockScope(prefix, leaseName string) string {
	return "sqlease:" + prefix + ":" + leaseName
}

// AdvisoryConfig configures NewLocker.
type AdvisoryConfig struct {
	// DSN is the connection string; each session opens its own connection,
	// outside any pool. It must reach PostgreSQL directly or through a
	// session-mode pooler: a transaction-mode pooler is detected and refused.
	DSN string
	// Prefix is the table prefix of the store.
	Prefix string
	// Key overrides the lock key; 0 means LockKey(DefaultLockScope(Prefix, lease)).
	Key int64
	// Keepalive is the TCP keepalive idle time of the session, on both ends;
	// it bounds how long a network partition keeps the lock held (≈ idle +
	// 3 probes 2 s apart). Default 5s.
	Keepalive time.Duration
}

// NewLocker returns the advisory-mode locker: pg_advisory_lock on a
// dedicated connection. Its Lost channel is driven by a read that stays
// blocked on the idle connection, so the end of the session is seen when it
// happens, not at the next poll.
func NewLocker(cfg AdvisoryConfig) (sqlease.SessionLocker, error) {
	if err := sqlease.ValidateTablePrefix(cfg.Prefix); err != nil {
		return nil, err
	}
	pcfg, err := pgx.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("%w: advisory lock connection string: %v", sqlease.ErrInvalidConfig, err)
	}
	durableCommits(pcfg) // its takeover hands out an epoch
	if cfg.Keepalive <= 0 {
		cfg.Keepalive = 5 * time.Second
	}
	q := advisoryQueries(cfg.Prefix)
	return func(ctx context.Context, name string) (sqlease.SessionLock, error) {
		key := cfg.Key
		if key == 0 {
			key = LockKey(DefaultLockScope(cfg.Prefix, name))
		}
		return openSession(ctx, pcfg.Copy(), cfg.Keepalive, key, q)
	}, nil
}

type advisorySQL struct{ takeover, renew, holds string }

func advisoryQueries(prefix string) advisorySQL {
	r := strings.NewReplacer("{leases}", prefix+"_leases",
		// The session holds the bigint advisory lock $key: pg_locks shows it
		// split into classid (high half) and objid (low half).
		"{held}", `EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
	AND objsubid = 1 AND classid::bigint = ($KEY::bigint >> 32) & 4294967295 AND objid::bigint = $KEY::bigint & 4294967295)`)
	return advisorySQL{
		// No lock check here: reading pg_locks scans the whole lock table
		// (≈ 2.5 ms, the bulk of a handoff), and the lock was granted on
		// this connection one round trip ago. Through a transaction-mode
		// pooler the next renew, which does check, refuses; meanwhile the
		// epoch bump fences whoever else took over.
		//
		// The lock says the previous lock holder's session has ended, not
		// that the lease's holder has: a term acquired without the lock
		// (its holder's lease expired while a frozen session kept the
		// lock) is live, and deposing it would open two gates at once
		// (finding F1, model/README.md). Such a term is taken over only
		// once it has expired; no row comes back until then.
		//
		// On a new timeline it holds off as Acquire does (timeline.go):
		// the hold-off row it leaves is not lease_locked, so no lock
		// winner deposes it before it expires.
		takeover: leaseUpsert(prefix+"_leases", "l.lease_locked OR l.expires_at <= EXCLUDED.acquired_at", "true"),
		// A term acquired without the lock that has won it since renews
		// here too, and is marked as locked from then on.
		renew: strings.ReplaceAll(r.Replace(`UPDATE {leases} AS l SET renewed_at = n.now, expires_at = n.now + $4::bigint * interval '1 millisecond', lease_locked = true
FROM (SELECT clock_timestamp() AS now) AS n
WHERE l.lease_name = $1 AND l.holder_id = $2 AND l.lease_epoch = $3 AND l.expires_at > n.now AND {held}
	AND `+renewTimeline+`
RETURNING l.acquired_at, l.renewed_at, l.expires_at, n.now`), "$KEY", "$5"),
		holds: strings.ReplaceAll(r.Replace(`SELECT {held}`), "$KEY", "$1"),
	}
}

// session is one advisory-lock session: a dedicated connection and, once
// locked, the goroutine that watches it.
type session struct {
	conn *pgx.Conn
	key  int64
	q    advisorySQL

	lost     chan struct{}
	lostOnce sync.Once
	closed   chan struct{}

	mu        sync.Mutex
	watching  bool
	interrupt context.CancelFunc // ends the watcher's blocked read
	reqs      chan func(*pgx.Conn)
	done      chan struct{} // closed when the watcher returns
	closeOnce sync.Once
}

func openSession(ctx context.Context, cfg *pgx.ConnConfig, keepalive time.Duration, key int64, q advisorySQL) (*session, error) {
	d := &net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepalive, Interval: 2 * time.Second, Count: 3}}
	cfg.DialFunc = d.DialContext
	secs := fmt.Sprint(int(keepalive.Seconds()))
	for k, v := range map[string]string{"tcp_keepalives_idle": secs, "tcp_keepalives_interval": "2", "tcp_keepalives_count": "3",
		"application_name": "sqlease-advisory"} {
		cfg.RuntimeParams[k] = v
	}
	// A cancelled context only interrupts the client's read; no cancel
	// request is sent. The watcher relies on this to pause its blocked read
	// without disturbing the session.
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("advisory session: %w", Classify(err))
	}
	return &session{conn: conn, key: key, q: q, lost: make(chan struct{}), closed: make(chan struct{}),
		reqs: make(chan func(*pgx.Conn), 1), done: make(chan struct{})}, nil
}

// Lock blocks in pg_advisory_lock. Whether the session really holds the
// lock — through a transaction-mode pooler the next statement runs on
// another backend — is checked by Takeover, in its own statement, so that
// the takeover follows the grant by a single round trip.
func (s *session) Lock(ctx context.Context) error {
	// Prepare what follows the lock now, while waiting costs nothing: the
	// takeover then needs one round trip per statement and no planning on
	// a cold backend.
	for _, q := range []string{s.q.holds, s.q.takeover, s.q.renew} {
		if _, err := s.conn.Prepare(ctx, q, q); err != nil {
			return fmt.Errorf("advisory lock %d: prepare: %w", s.key, Classify(err))
		}
	}
	s.warmUp(ctx)
	if _, err := s.conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, s.key); err != nil {
		return fmt.Errorf("advisory lock %d: %w", s.key, Classify(err))
	}
	return nil
}

// warmUp runs the takeover once, on a lease name no caller can use (it has
// a space), in a transaction it rolls back: a fresh backend loads the
// table's caches and compiles the notification trigger on its first
// execution, which would otherwise add about 1.5 ms to the handoff.
func (s *session) warmUp(ctx context.Context) {
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		return
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var discard [5]time.Time
	var epoch int64
	_ = tx.QueryRow(ctx, s.q.takeover, "sqlease warm-up", "sqlease warm-up", int64(0)).
		Scan(&epoch, &discard[0], &discard[1], &discard[2], &discard[3])
}

// startWatching hands the connection to the watcher: from the takeover on,
// the end of the session closes Lost at once.
func (s *session) startWatching() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watching {
		return
	}
	s.watching = true
	go s.watch()
}

// watch keeps a read blocked on the idle connection. It returns, closing
// Lost, when the read fails for any other reason than its own interruption;
// interruptions let Takeover and Renew use the connection in between.
func (s *session) watch() {
	defer close(s.done)
	for {
		ctx, cancel := context.WithCancel(context.Background())
		s.mu.Lock()
		s.interrupt = cancel
		s.mu.Unlock()
		var err error
		if len(s.reqs) == 0 { // else a request queued before s.interrupt was set would wait for do's ticker
			err = s.conn.PgConn().WaitForNotification(ctx)
		}
		interrupted := ctx.Err() != nil
		cancel()
		select {
		case <-s.closed:
			return
		default:
		}
		if err != nil && !interrupted {
			s.markLost()
			return
		}
		for served := true; served; {
			select {
			case fn := <-s.reqs:
				fn(s.conn)
			default:
				served = false
			}
		}
	}
}

func (s *session) markLost() { s.lostOnce.Do(func() { close(s.lost) }) }

// do runs fn on the connection: directly before Lock, through the watcher
// after.
func (s *session) do(ctx context.Context, fn func(*pgx.Conn) error) error {
	s.mu.Lock()
	watching, interrupt := s.watching, s.interrupt
	s.mu.Unlock()
	if !watching {
		return fn(s.conn)
	}
	res := make(chan error, 1)
	select {
	case s.reqs <- func(c *pgx.Conn) { res <- fn(c) }:
	case <-s.lost:
		return sqlease.ErrSessionLost
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	interrupt = s.interrupt // the watcher's current read, now that the request is queued
	s.mu.Unlock()
	if interrupt != nil {
		interrupt()
	}
	// The request may have been queued between the watcher's drain and its
	// next read: keep interrupting until it is served.
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case err := <-res:
			return err
		case <-s.lost:
			return sqlease.ErrSessionLost
		case <-t.C:
			s.mu.Lock()
			interrupt = s.interrupt
			s.mu.Unlock()
			if interrupt != nil { // nil until the watcher's first read: it serves the request before that read
				interrupt()
			}
		}
	}
}

// Takeover implements sqlease.SessionLock.
func (s *session) Takeover(ctx context.Context, name, holder string, ttl time.Duration) (sqlease.Lease, error) {
	if err := sqlease.ValidateLease(name, holder, ttl); err != nil {
		return sqlease.Lease{}, err
	}
	l := sqlease.Lease{Name: name, Holder: holder}
	err := s.do(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, s.q.takeover, name, holder, ttl.Milliseconds()).
			Scan(&l.Epoch, &l.AcquiredAt, &l.RenewedAt, &l.ExpiresAt, &l.ObservedAt)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return sqlease.Lease{}, fmt.Errorf("take over lease %q: %w: it was acquired without the lock and has not expired", name, sqlease.ErrLeaseHeld)
	}
	if err != nil {
		return sqlease.Lease{}, fmt.Errorf("take over lease %q: %w", name, s.fail(err))
	}
	s.startWatching()
	utc(&l)
	return l, nil
}

// Renew implements sqlease.SessionLock.
func (s *session) Renew(ctx context.Context, tok sqlease.Token, ttl time.Duration) (sqlease.Lease, error) {
	l := sqlease.Lease{Name: tok.Name, Holder: tok.Holder, Epoch: tok.Epoch}
	var held bool
	err := s.do(ctx, func(c *pgx.Conn) error {
		err := c.QueryRow(ctx, s.q.renew, tok.Name, tok.Holder, tok.Epoch, ttl.Milliseconds(), s.key).
			Scan(&l.AcquiredAt, &l.RenewedAt, &l.ExpiresAt, &l.ObservedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			if herr := c.QueryRow(ctx, s.q.holds, s.key).Scan(&held); herr != nil {
				return herr
			}
		}
		return err
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows) && !held:
		return sqlease.Lease{}, fmt.Errorf("renew lease %s: %w: the session no longer holds its lock (a connection pooler in transaction mode?)", tok, sqlease.ErrSessionLost)
	case errors.Is(err, pgx.ErrNoRows):
		return sqlease.Lease{}, fmt.Errorf("renew lease %s: %w", tok, sqlease.ErrLeaseLost)
	case err != nil:
		return sqlease.Lease{}, fmt.Errorf("renew lease %s: %w", tok, s.fail(err))
	}
	utc(&l)
	return l, nil
}

// fail classifies an error on the session; an interrupted or broken
// connection means the session can no longer be trusted.
func (s *session) fail(err error) error {
	if s.conn.IsClosed() || pgconn.Timeout(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		s.markLost()
		return fmt.Errorf("%w: %w", sqlease.ErrSessionLost, err)
	}
	return Classify(err)
}

// Lost implements sqlease.SessionLock. The session is watched from its
// successful Takeover on; before that, a dead session fails the Takeover.
func (s *session) Lost() <-chan struct{} { return s.lost }

// Close implements sqlease.SessionLock: it unlocks (best effort) and closes
// the connection, which frees the lock in any case.
func (s *session) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		s.mu.Lock()
		watching := s.watching
		s.mu.Unlock()
		if watching {
			_ = s.do(ctx, func(c *pgx.Conn) error {
				_, err := c.Exec(ctx, `SELECT pg_advisory_unlock($1)`, s.key)
				return err
			})
		}
		close(s.closed)
		// Stop the watcher before closing: the connection is not safe for
		// concurrent use.
		if watching {
			t := time.NewTicker(5 * time.Millisecond)
			for stopped := false; !stopped; {
				s.mu.Lock()
				interrupt := s.interrupt
				s.mu.Unlock()
				if interrupt != nil {
					interrupt()
				}
				select {
				case <-s.done:
					stopped = true
				case <-t.C:
				}
			}
			t.Stop()
		}
		err = s.conn.Close(ctx)
		s.markLost()
	})
	return err
}

func utc(l *sqlease.Lease) {
	l.AcquiredAt, l.RenewedAt, l.ExpiresAt, l.ObservedAt = l.AcquiredAt.UTC(), l.RenewedAt.UTC(), l.ExpiresAt.UTC(), l.ObservedAt.UTC()
}
