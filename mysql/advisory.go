package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlease/sqlease"
)

// maxLockName is the longest GET_LOCK name MySQL 5.7+ accepts, in characters.
const maxLockName = 64

// LockName is the default GET_LOCK name of a lease's advisory lock:
// "sqlease:<prefix>:<lease>", which keeps two leases (or two deployments
// sharing a server) from sharing a lock. Lock names are server-wide, case
// insensitive and at most 64 characters, while lease names are case
// sensitive and up to 128: a name that is longer than 64 characters or has
// upper-case letters is replaced by "sqlease:" and the first 56 hex digits
// of its SHA-256. (A hashed name has one colon and a natural one two, so
// they never meet.)
func LockName(prefix, leaseName string) string {
	n := "sqlease:" + prefix + ":" + leaseName
	if len(n) <= maxLockName && n == strings.ToLower(n) {
		return n
	}
	sum := sha256.Sum256([]byte(n))
	return "sqlease:" + hex.EncodeToString(sum[:28])
}

// AdvisoryConfig configures NewLocker.
type AdvisoryConfig struct {
	// DSN is the mysql:// URL of the server, as OpenStore takes it (see
	// DSN). Each session opens its own connection, outside any pool. It
	// must reach the server directly or through a proxy that keeps a client
	// on one server session: a multiplexing proxy is detected and refused.
	DSN string
	// Prefix is the table prefix of the store.
	Prefix string
	// Key overrides the lock name, 1–64 characters; "" means
	// LockName(Prefix, lease).
	Key string
	// Keepalive is the TCP keepalive idle time of the client's end (then 3
	// probes 2 s apart): it bounds how long the leader takes to notice a
	// network partition. Default 5s. The server's end is bounded by
	// wait_timeout instead, which the session sets (see NewLocker).
	Keepalive time.Duration
}

// Timing of a session. A follower waits in GET_LOCK at most lockWait per
// statement, so an idle follower costs one statement per lockWait; a
// session whose client went silent while it waited (frozen process, network
// partition) is ended by the server after idleBeforeTakeover, freeing a lock
// it may have been granted meanwhile.
const (
	lockWait           = 5 * time.Second
	idleBeforeTakeover = 10 * time.Second
	// maxPending bounds the bytes buffered from an idle connection: the
	// server sends nothing unasked but a goodbye.
	maxPending = 64 << 10
)

// NewLocker returns the advisory-mode locker: GET_LOCK on a dedicated
// connection that database/sql never replaces. Its Lost channel is driven by
// a read kept blocked on the idle connection underneath the driver, as
// PostgreSQL's is: the end of the session is seen when it happens, at no
// statement cost.
//
// The server cannot be told to send keepalives on one session, so the
// session bounds its own idleness with wait_timeout: 10 s while it waits for
// the lock, the lease duration (rounded up, + 1 s) from Takeover on. A
// holder that goes silent for a whole lease — frozen, partitioned — has its
// session ended by the server and its lock freed when the lease expires, and
// a follower frozen while it waited holds a lock it was granted meanwhile for
// at most 15 s. Until Takeover, a client must thus use the session (Lock,
// Takeover) within 10 s of its last statement.
//
// Renew's statement checks IS_USED_LOCK, which MySQL deems unsafe for
// statement-based replication: with binlog_format=STATEMENT the server logs
// a warning per renew (MIXED and ROW are fine).
func NewLocker(cfg AdvisoryConfig) (sqlease.SessionLocker, error) {
	if err := sqlease.ValidateTablePrefix(cfg.Prefix); err != nil {
		return nil, err
	}
	if n := utf8.RuneCountInString(cfg.Key); n > maxLockName {
		return nil, fmt.Errorf("%w: advisory lock name %q is %d characters, MySQL allows %d", sqlease.ErrInvalidConfig, cfg.Key, n, maxLockName)
	}
	mcfg, err := config(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("advisory lock connection: %w", err)
	}
	if cfg.Keepalive <= 0 {
		cfg.Keepalive = 5 * time.Second
	}
	mcfg.Params["wait_timeout"] = strconv.Itoa(int(idleBeforeTakeover / time.Second))
	mcfg.ConnectionAttributes = "program_name:sqlease-advisory"
	// The session's connection dies by design (KILL, wait_timeout, Close of
	// a lost session), which the driver would log on its own; its ending is
	// reported through Lost and the errors returned.
	mcfg.Logger = discardLogger{}
	q := advisoryQueries(cfg.Prefix)
	return func(ctx context.Context, name string) (sqlease.SessionLock, error) {
		if err := sqlease.ValidateLeaseName(name); err != nil {
			return nil, err
		}
		lock := cfg.Key
		if lock == "" {
			lock = LockName(cfg.Prefix, name)
		}
		return openSession(ctx, mcfg.Clone(), cfg.Keepalive, lock, q)
	}, nil
}

type advisorySQL struct{ getLock, holds, unlockedTerm, takeover, takeoverRead, renew, renewRead string }

func advisoryQueries(prefix string) advisorySQL {
	r := strings.NewReplacer("{leases}", prefix+"_leases", "{now}", now,
		"{held}", `IFNULL(IS_USED_LOCK(?) = CONNECTION_ID(), 0)`)
	return advisorySQL{
		getLock: `SELECT GET_LOCK(?, ` + strconv.Itoa(int(lockWait/time.Second)) + `)`,
		holds:   r.Replace(`SELECT {held}`),
		// The lock says the previous lock holder's session has ended, not
		// that the lease's holder has: a live term acquired without the
		// lock (its holder's lease expired while a frozen session kept the
		// lock) must be left to expire, or two gates would be open at once
		// (finding F1, model/README.md). Read under the row lock, in the
		// takeover's transaction.
		unlockedTerm: r.Replace(`SELECT 1 FROM {leases} WHERE lease_name = ? AND lease_locked = 0 AND expires_at > {now} FOR UPDATE`),
		// Otherwise unconditional: the lock, checked in the same
		// transaction, says this session may take the lease over, expired
		// or not.
		takeover: r.Replace(`INSERT INTO {leases} (lease_name, holder_id, lease_epoch, acquired_at, renewed_at, expires_at, lease_locked)
VALUES (?, ?, 1, {now}, {now}, ` + plusMS(now, "?") + `, 1)
ON DUPLICATE KEY UPDATE
	holder_id   = VALUES(holder_id),
	lease_epoch = lease_epoch + 1,
	acquired_at = VALUES(acquired_at),
	renewed_at  = VALUES(renewed_at),
	expires_at  = VALUES(expires_at),
	lease_locked = 1`),
		takeoverRead: r.Replace(`SELECT lease_epoch, acquired_at, renewed_at, expires_at, acquired_at
FROM {leases} WHERE lease_name = ? AND holder_id = ?`),
		// Marks a term acquired without the lock, which has won it since,
		// as held through it.
		renew: r.Replace(`UPDATE {leases} SET renewed_at = {now}, expires_at = ` + plusMS(now, "?") + `, lease_locked = 1
WHERE lease_name = ? AND holder_id = ? AND lease_epoch = ? AND expires_at > {now} AND {held}`),
		renewRead: r.Replace(`SELECT acquired_at, renewed_at, expires_at, renewed_at
FROM {leases} WHERE lease_name = ? AND holder_id = ? AND lease_epoch = ?`),
	}
}

// session is one advisory-lock session: a private one-connection pool whose
// connection is pinned, and the raw network connection under it, watched
// while the session is locked and idle.
type session struct {
	db   *sql.DB
	conn *sql.Conn
	name string // the GET_LOCK name
	q    advisorySQL

	dialMu sync.Mutex
	nc     *watchedConn
	pinned bool

	// sem serializes the use of the connection: the driver's and the
	// watcher's reads must never overlap.
	sem   chan struct{}
	stmts struct{ getLock, holds, renew, renewRead *sql.Stmt }

	locked    bool // under sem
	idleSet   bool // under sem: wait_timeout follows the lease (setIdle)
	closing   atomic.Bool
	lost      chan struct{}
	lostOnce  sync.Once
	closeOnce sync.Once
}

func openSession(ctx context.Context, mcfg *mysql.Config, keepalive time.Duration, name string, q advisorySQL) (*session, error) {
	s := &session{name: name, q: q, sem: make(chan struct{}, 1), lost: make(chan struct{})}
	d := &net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepalive, Interval: 2 * time.Second, Count: 3}}
	mcfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		s.dialMu.Lock()
		defer s.dialMu.Unlock()
		if s.pinned {
			// Unreachable through a pinned *sql.Conn; a session lock must
			// never move to a new connection in any case.
			return nil, errors.New("advisory session: refusing to reconnect: the session's connection is gone")
		}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		s.nc = &watchedConn{Conn: c, onEnd: s.markLost}
		return s.nc, nil
	}
	connector, err := mysql.NewConnector(mcfg)
	if err != nil {
		return nil, fmt.Errorf("%w: advisory session: %v", sqlease.ErrInvalidConfig, err)
	}
	s.db = sql.OpenDB(connector)
	s.db.SetMaxOpenConns(1)
	s.db.SetMaxIdleConns(1)
	conn, err := s.db.Conn(ctx)
	if err != nil {
		s.db.Close()
		return nil, fmt.Errorf("advisory session: %w", Classify(err))
	}
	s.dialMu.Lock()
	s.pinned = true
	s.dialMu.Unlock()
	s.conn = conn
	return s, nil
}

// use runs fn with the connection to itself: the watcher, if any, is paused
// for the duration and resumed after, unless the session ended meanwhile.
func (s *session) use(ctx context.Context, fn func() error) error {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.sem }()
	if s.closing.Load() || s.isLost() {
		return sqlease.ErrSessionLost
	}
	s.nc.pause()
	err := fn()
	if s.locked && !s.isLost() {
		s.nc.watch()
	}
	return err
}

func (s *session) isLost() bool {
	select {
	case <-s.lost:
		return true
	default:
		return false
	}
}

func (s *session) markLost() { s.lostOnce.Do(func() { close(s.lost) }) }

// Lock waits in GET_LOCK, lockWait at a time, then checks that the session
// really holds the lock: behind a multiplexing proxy the check runs on
// another server session and fails.
func (s *session) Lock(ctx context.Context) error {
	err := s.use(ctx, func() error {
		if s.locked {
			return nil
		}
		// Prepare what follows the lock now, while waiting costs nothing.
		for _, p := range []struct {
			stmt **sql.Stmt
			sql  string
		}{{&s.stmts.getLock, s.q.getLock}, {&s.stmts.holds, s.q.holds}, {&s.stmts.renew, s.q.renew}, {&s.stmts.renewRead, s.q.renewRead}} {
			if *p.stmt != nil {
				continue
			}
			st, err := s.conn.PrepareContext(ctx, p.sql)
			if err != nil {
				return fmt.Errorf("prepare: %w", err)
			}
			*p.stmt = st
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("advisory lock %q: %w", s.name, s.fail(ctx, err))
	}
	for {
		var got sql.NullInt64
		err := s.use(ctx, func() error {
			if s.locked {
				got = sql.NullInt64{Int64: 1, Valid: true}
				return nil
			}
			return s.stmts.getLock.QueryRowContext(ctx, s.name).Scan(&got)
		})
		if err != nil {
			return fmt.Errorf("advisory lock %q: %w", s.name, s.fail(ctx, err))
		}
		if !got.Valid {
			// GET_LOCK's NULL: the session was killed, or out of memory.
			s.markLost()
			return fmt.Errorf("advisory lock %q: %w: GET_LOCK failed", s.name, sqlease.ErrSessionLost)
		}
		if got.Int64 == 1 {
			break
		}
	}
	var held bool
	err = s.use(ctx, func() error {
		if err := s.stmts.holds.QueryRowContext(ctx, s.name).Scan(&held); err != nil {
			return err
		}
		s.locked = held // from here on, use watches the idle connection
		return nil
	})
	if err != nil {
		return fmt.Errorf("advisory lock %q: %w", s.name, s.fail(ctx, err))
	}
	if !held {
		return fmt.Errorf("advisory lock %q: %w: the session does not hold the lock it was just granted — a proxy or pooler that multiplexes server sessions (e.g. ProxySQL)? Connect directly or keep each client on one server session", s.name, sqlease.ErrSessionLost)
	}
	return nil
}

// setIdle lets the server end the session once it has been silent for the
// lease duration (rounded up) + 1 s: a holder silent for a whole lease has
// lost it anyway, and its lock is freed then. Called under sem.
func (s *session) setIdle(ctx context.Context, ttl time.Duration) error {
	idle := int64((ttl+time.Second-1)/time.Second) + 1
	if _, err := s.conn.ExecContext(ctx, `SET SESSION wait_timeout = `+strconv.FormatInt(idle, 10)); err != nil {
		return err
	}
	s.idleSet = true
	return nil
}

// errUnlockedTerm is Takeover's refusal inside its transaction.
var errUnlockedTerm = errors.New("lease acquired without the lock, unexpired")

// Takeover implements sqlease.SessionLock.
func (s *session) Takeover(ctx context.Context, name, holder string, ttl time.Duration) (sqlease.Lease, error) {
	if err := sqlease.ValidateLease(name, holder, ttl); err != nil {
		return sqlease.Lease{}, err
	}
	l := sqlease.Lease{Name: name, Holder: holder}
	var held bool
	err := s.use(ctx, func() error {
		if err := s.setIdle(ctx, ttl); err != nil {
			return err
		}
		tx, err := s.conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := tx.QueryRowContext(ctx, s.q.holds, s.name).Scan(&held); err != nil || !held {
			return err
		}
		var one int
		switch err := tx.QueryRowContext(ctx, s.q.unlockedTerm, name).Scan(&one); {
		case err == nil:
			return errUnlockedTerm
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q.takeover, name, holder, ttl.Milliseconds()); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, s.q.takeoverRead, name, holder).
			Scan(&l.Epoch, &l.AcquiredAt, &l.RenewedAt, &l.ExpiresAt, &l.ObservedAt); err != nil {
			return err
		}
		return tx.Commit()
	})
	if errors.Is(err, errUnlockedTerm) {
		return sqlease.Lease{}, fmt.Errorf("take over lease %q: %w: it was acquired without the lock and has not expired", name, sqlease.ErrLeaseHeld)
	}
	if err != nil {
		return sqlease.Lease{}, fmt.Errorf("take over lease %q: %w", name, s.fail(ctx, err))
	}
	if !held {
		return sqlease.Lease{}, fmt.Errorf("take over lease %q: %w: the session does not hold lock %q", name, sqlease.ErrSessionLost, s.name)
	}
	utc(&l)
	return l, nil
}

// Renew implements sqlease.SessionLock. The update and the read back are
// separate autocommit statements, not a transaction: only this holder at this
// epoch writes the row, and only through this session, whose statements do
// not overlap, so the read filtered by holder and epoch sees this renew's
// write. That saves BEGIN and COMMIT on the leader's only periodic cost.
func (s *session) Renew(ctx context.Context, tok sqlease.Token, ttl time.Duration) (sqlease.Lease, error) {
	l := sqlease.Lease{Name: tok.Name, Holder: tok.Holder, Epoch: tok.Epoch}
	renewed, held := false, true
	err := s.use(ctx, func() error {
		if !s.locked {
			return fmt.Errorf("%w: renew before Lock", sqlease.ErrSessionLost)
		}
		// A term acquired without the lock renews here once its Lock is
		// granted, without a Takeover having set the idle limit.
		if !s.idleSet {
			if err := s.setIdle(ctx, ttl); err != nil {
				return err
			}
		}
		res, err := s.stmts.renew.ExecContext(ctx, ttl.Milliseconds(), tok.Name, tok.Holder, tok.Epoch, s.name)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return s.stmts.holds.QueryRowContext(ctx, s.name).Scan(&held)
		}
		err = s.stmts.renewRead.QueryRowContext(ctx, tok.Name, tok.Holder, tok.Epoch).
			Scan(&l.AcquiredAt, &l.RenewedAt, &l.ExpiresAt, &l.ObservedAt)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // taken over between the two statements: not ours any more
		}
		renewed = err == nil
		return err
	})
	switch {
	case err != nil:
		return sqlease.Lease{}, fmt.Errorf("renew lease %s: %w", tok, s.fail(ctx, err))
	case !held:
		return sqlease.Lease{}, fmt.Errorf("renew lease %s: %w: the session no longer holds lock %q (a proxy multiplexing server sessions?)", tok, sqlease.ErrSessionLost, s.name)
	case !renewed:
		return sqlease.Lease{}, fmt.Errorf("renew lease %s: %w", tok, sqlease.ErrLeaseLost)
	}
	utc(&l)
	return l, nil
}

// fail classifies an error on the session. The server reporting an error on
// a live session leaves it usable; anything else — a broken or killed
// connection, a statement interrupted by its context, which makes the driver
// close the connection — ends it.
func (s *session) fail(ctx context.Context, err error) error {
	if errors.Is(err, sqlease.ErrSessionLost) {
		return err
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case errConnectionKilled, errServerShutdown, errServerGone, errServerLost, errInteractionTimeout:
		default:
			if ctx.Err() == nil {
				return Classify(err)
			}
		}
	}
	s.markLost()
	return fmt.Errorf("%w: %w", sqlease.ErrSessionLost, Classify(err))
}

// Lost implements sqlease.SessionLock.
func (s *session) Lost() <-chan struct{} { return s.lost }

// Close implements sqlease.SessionLock: it releases the lock, if held, and
// closes the connection whatever happened, which frees the lock in any case.
// Should ctx end while another call holds the connection, the connection is
// cut under it.
func (s *session) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		select {
		case s.sem <- struct{}{}:
		case <-ctx.Done():
			s.nc.Close() // ends the call in flight, which frees sem
			s.sem <- struct{}{}
		}
		s.nc.pause()
		if s.locked && !s.isLost() && ctx.Err() == nil {
			if _, rerr := s.conn.ExecContext(ctx, `DO RELEASE_LOCK(?)`, s.name); rerr != nil {
				err = fmt.Errorf("advisory lock %q: release: %w", s.name, Classify(rerr))
			}
		}
		for _, st := range []*sql.Stmt{s.stmts.getLock, s.stmts.holds, s.stmts.renew, s.stmts.renewRead} {
			if st != nil {
				st.Close()
			}
		}
		s.conn.Close()
		if cerr := s.db.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("advisory lock %q: close: %w", s.name, cerr)
		}
		s.nc.Close() // should the driver have left it open
		s.markLost()
		<-s.sem
	})
	return err
}

type discardLogger struct{}

func (discardLogger) Print(...any) {}

func utc(l *sqlease.Lease) {
	l.AcquiredAt, l.RenewedAt, l.ExpiresAt, l.ObservedAt = l.AcquiredAt.UTC(), l.RenewedAt.UTC(), l.ExpiresAt.UTC(), l.ObservedAt.UTC()
}

// watchedConn is the network connection under the driver. While the session
// is locked and idle, a goroutine keeps a read blocked on it: the server
// sends nothing unasked, so the read returns only when the session ends —
// end of stream after a KILL, a server shutdown or wait_timeout, an error
// when keepalives find the peer gone. Bytes it reads (a TLS record, the
// server's goodbye packet) are handed to the driver's next read.
type watchedConn struct {
	net.Conn
	onEnd func()

	mu      sync.Mutex
	pending []byte
	stop    bool
	done    chan struct{} // non-nil while a watch runs; closed when it returns
}

func (c *watchedConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	return c.Conn.Read(p)
}

// watch starts the blocked read; the connection must be idle.
func (c *watchedConn) watch() {
	done := make(chan struct{})
	c.mu.Lock()
	c.stop, c.done = false, done
	c.mu.Unlock()
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			// The deadline is cleared under mu, so that pause, which sets
			// it under mu, cannot be undone here.
			c.mu.Lock()
			if c.stop {
				c.mu.Unlock()
				return
			}
			err := c.Conn.SetReadDeadline(time.Time{})
			c.mu.Unlock()
			n := 0
			if err == nil {
				n, err = c.Conn.Read(buf)
			}
			c.mu.Lock()
			c.pending = append(c.pending, buf[:n]...)
			stopped, overflow := c.stop, len(c.pending) > maxPending
			c.mu.Unlock()
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				if stopped {
					return
				}
			case err != nil || overflow:
				c.onEnd()
				return
			}
		}
	}()
}

// pause interrupts the blocked read, if any, and waits for the watch to end.
func (c *watchedConn) pause() {
	if c == nil {
		return
	}
	c.mu.Lock()
	done := c.done
	c.done = nil
	if done != nil {
		c.stop = true
		_ = c.Conn.SetReadDeadline(time.Unix(1, 0))
	}
	c.mu.Unlock()
	if done != nil {
		<-done
		_ = c.Conn.SetReadDeadline(time.Time{})
	}
}

func (c *watchedConn) Close() error {
	if c == nil {
		return nil
	}
	return c.Conn.Close()
}
