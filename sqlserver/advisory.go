package sqlserver

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	mssql "github.com/microsoft/go-mssqldb"
	"github.com/microsoft/go-mssqldb/msdsn"
	"github.com/sqlease/sqlease"
)

// Advisory mode on SQL Server (SPEC §3): the lock is an exclusive
// application lock (sp_getapplock) owned by the session, on one dedicated
// connection. The server frees it when the session ends — a crash, a KILL,
// a closed connection — so a follower waiting in Lock takes over at once;
// the lease row still carries the epoch that fences the old holder.
//
// Unlike PostgreSQL's blocked read, the driver offers no way to wait on an
// idle connection for the server to end it: the holder polls its session
// instead (AdvisoryConfig.CheckInterval), with APPLOCK_MODE, and closes
// Lost when the poll fails, goes unanswered or finds the lock gone.
//
// Like the rest of this package, none of this has run against a server in
// this repository's CI; see advisory_test.go for the tests that need one.

const (
	// maxResource is the length of sp_getapplock's @Resource, nvarchar(255),
	// in UTF-16 code units. A longer value is silently truncated by the
	// server, so two names sharing their first 255 characters would share a
	// lock: LockResource hashes instead.
	maxResource = 255

	// lockWait bounds each sp_getapplock wait: Lock repeats it until the
	// lock is granted or ctx ends, so no request waits unseen for long on a
	// connection that may have died.
	lockWait = 2 * time.Second

	// checkTimeout is how long a statement on the session may go
	// unanswered before the session counts as lost. A lock check is a
	// trivial statement; no answer within it means the server or the
	// network is gone, and the holder must stop acting long before the
	// server's own TCP keepalive (30 s by default) ends the session and
	// frees the lock for someone else.
	checkTimeout = 5 * time.Second

	defaultCheckInterval = 250 * time.Millisecond
	defaultKeepalive     = 5 * time.Second

	// exclusive is what APPLOCK_MODE returns while the session holds the
	// lock as Lock takes it.
	exclusive = "Exclusive"
)

// AdvisoryConfig configures NewLocker.
type AdvisoryConfig struct {
	// DSN is the connection string, in any form Open accepts, Entra ID
	// included. Each session opens its own connection, outside any pool.
	// It must reach the database the lease tables are in: application
	// locks belong to the current database.
	DSN string
	// Prefix is the table prefix of the store.
	Prefix string
	// Resource overrides the sp_getapplock resource name, for every lease
	// the locker opens; "" means LockResource(Prefix, lease). At most 255
	// UTF-16 code units; compared case-sensitively by the server.
	Resource string
	// Keepalive is the client's TCP keepalive on each session's
	// connection, set as the driver's keepAlive parameter (whole seconds,
	// rounded up) unless DSN already sets keepAlive. It is a backstop: a
	// session is seldom idle (Lock repeats its request every 2 s, a holder
	// checks every CheckInterval, each with a deadline for the answer).
	// The server notices a dead client through its own keepalive, a server
	// setting (30 s by default), not through this. Default 5s.
	Keepalive time.Duration
	// CheckInterval is how often a lock holder checks that its session
	// still holds the lock; Lost closes at the first check that fails or
	// goes unanswered for 5 s. Default 250ms.
	CheckInterval time.Duration
}

// LockResource returns the sp_getapplock resource of a lease's advisory
// lock unless AdvisoryConfig.Resource overrides it: "sqlease:" + prefix +
// ":" + leaseName. It names the prefix and the lease, so that two leases, or
// two deployments sharing a database, never share a lock, and it cannot
// clash with the migration lock, which is the bracket-quoted table name.
//
// For any valid prefix (up to 31 characters) and lease name (up to 128) it
// is at most 168 characters, well within @Resource's nvarchar(255). A longer
// string (only from names sqlease would refuse) keeps its start and ends
// with "#" and 32 hex digits of the SHA-256 of the whole string, so that it
// fits in 255 UTF-16 code units and stays distinct; valid names contain no
// "#", so a hashed resource never equals an unhashed one.
func LockResource(prefix, leaseName string) string {
	return fitResource("sqlease:" + prefix + ":" + leaseName)
}

func fitResource(name string) string {
	if utf16Len(name) <= maxResource {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	tail := "#" + hex.EncodeToString(sum[:16])
	room := maxResource - len(tail)
	var b strings.Builder
	n := 0
	for _, r := range name {
		w := utf16.RuneLen(r)
		if w < 0 { // not encodable (invalid UTF-8 decodes as U+FFFD, which is)
			r, w = utf8.RuneError, 1
		}
		if n+w > room {
			break
		}
		b.WriteRune(r)
		n += w
	}
	return b.String() + tail
}

// utf16Len is the length of s in UTF-16 code units, as the driver sends it.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if w := utf16.RuneLen(r); w > 0 {
			n += w
		} else {
			n++
		}
	}
	return n
}

// locker is what NewLocker builds; open is the sqlease.SessionLocker.
type locker struct {
	dsn      string // cfg.DSN with keepAlive set
	prefix   string
	resource string // override, or ""
	interval time.Duration
	q        advisorySQL
}

// NewLocker returns the advisory-mode locker for SQL Server: an exclusive
// session-owned sp_getapplock on a dedicated connection per session. It
// checks the configuration but does not connect; each call of the returned
// SessionLocker opens one connection.
//
// A session is exactly one connection, pinned from a private pool of one,
// and is never reconnected: if the connection dies the session is lost,
// and the elector opens a new one. Lost is driven by a poll (see
// AdvisoryConfig.CheckInterval), not by a blocked read: between a KILL of
// the holder's session and Lost closing there is up to one interval plus a
// round trip, during which a follower may already have taken over; the
// epoch fences the old holder's database writes, and Elector.Ensure is the
// check to make before an external effect. A network partition is noticed
// by the holder within CheckInterval + 5 s, and by the server only through
// its own TCP keepalive (30 s by default), so the holder stops first.
//
// It returns an error wrapping sqlease.ErrInvalidName for an invalid
// prefix and sqlease.ErrInvalidConfig for a connection string Open refuses
// or a Resource longer than 255 characters.
func NewLocker(cfg AdvisoryConfig) (sqlease.SessionLocker, error) {
	l, err := newLocker(cfg)
	if err != nil {
		return nil, err
	}
	return l.open, nil
}

func newLocker(cfg AdvisoryConfig) (*locker, error) {
	if err := sqlease.ValidateTablePrefix(cfg.Prefix); err != nil {
		return nil, err
	}
	if cfg.Resource != "" && utf16Len(cfg.Resource) > maxResource {
		return nil, fmt.Errorf("%w: advisory lock resource must be at most %d characters, got %d", sqlease.ErrInvalidConfig, maxResource, utf16Len(cfg.Resource))
	}
	if cfg.Keepalive <= 0 {
		cfg.Keepalive = defaultKeepalive
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = defaultCheckInterval
	}
	// Open is the one place connection strings are checked (Entra ID,
	// timezone); it does not connect.
	db, err := Open(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("advisory lock: %w", err)
	}
	db.Close()
	dsn, err := withKeepAlive(cfg.DSN, cfg.Keepalive)
	if err != nil {
		return nil, err
	}
	q, err := advisoryQueries(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	return &locker{dsn: dsn, prefix: cfg.Prefix, resource: cfg.Resource, interval: cfg.CheckInterval, q: q}, nil
}

// withKeepAlive returns dsn with the driver's keepAlive parameter set to ka
// in whole seconds (rounded up), in the string's own form, unless dsn sets
// keepAlive already: an explicit choice, 0 (off) included, wins.
func withKeepAlive(dsn string, ka time.Duration) (string, error) {
	if _, ok := params(dsn)[msdsn.KeepAlive]; ok {
		return dsn, nil
	}
	n := int64((ka + time.Second - 1) / time.Second)
	secs := strconv.FormatInt(n, 10)
	var out string
	if isURL(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("%w: sqlserver connection string %s is not a valid URL", sqlease.ErrInvalidConfig, Redact(dsn))
		}
		if u.RawQuery != "" {
			u.RawQuery += "&"
		}
		u.RawQuery += "keepAlive=" + secs
		out = u.String()
	} else {
		out = strings.TrimRightFunc(dsn, func(r rune) bool { return r == ';' || unicode.IsSpace(r) }) + ";keepAlive=" + secs
	}
	// The driver must read back what was meant, or the string was not
	// split as this package thought.
	cfg, err := msdsn.Parse(out)
	if err != nil || cfg.KeepAlive != time.Duration(n)*time.Second {
		return "", fmt.Errorf("%w: cannot set keepAlive in sqlserver connection string %s; set keepAlive=%s in it", sqlease.ErrInvalidConfig, Redact(dsn), secs)
	}
	return out, nil
}

// advisorySQL holds the statements of a session. Arguments:
//
//	lock     (resource, timeout_ms int)  -> sp_getapplock's return code
//	holds    (resource)                  -> APPLOCK_MODE of this session
//	takeover (name, holder, ttl_ms, resource) -> epoch, acquired, renewed, expires, now
//	renew    (name, holder, epoch, ttl_ms, resource) -> acquired, renewed, expires, now
//	release  (resource)
type advisorySQL struct{ lock, holds, takeover, renew, release string }

// held is true while this session holds the application lock named by the
// parameter p exclusively.
func held(p string) string {
	return "APPLOCK_MODE('public', " + p + ", 'Session') = '" + exclusive + "'"
}

func advisoryQueries(prefix string) (advisorySQL, error) {
	d, err := Dialect(prefix)
	if err != nil {
		return advisorySQL{}, err
	}
	r := strings.NewReplacer("{leases}", quote(prefix+"_leases"), "{n}", nowTable)
	return advisorySQL{
		// Session-owned, so the lock outlives the statement and needs no
		// transaction; the wait is bounded so Lock can loop.
		lock: `DECLARE @r int;
EXEC @r = sp_getapplock @Resource = @p1, @LockMode = 'Exclusive', @LockOwner = 'Session', @LockTimeout = @p2;
SELECT @r;`,
		holds: `SELECT APPLOCK_MODE('public', @p1, 'Session')`,
		// Acquire's MERGE under the same hints, with an empty source unless
		// this session holds the lock: one atomic statement, so no
		// transaction can be left open by an interrupted takeover. The lock
		// says the previous lock holder's session has ended, not that the
		// lease's holder has: a live term acquired without the lock (its
		// holder's lease expired while a frozen session kept the lock) is
		// left to expire, or two gates would be open at once (finding F1,
		// model/README.md).
		takeover: r.Replace(`MERGE INTO {leases} WITH (UPDLOCK, HOLDLOCK) AS l
USING (
	SELECT @p1 AS lease_name, @p2 AS holder_id, n.now, ` + addMS(msParam("@p3"), "n.now") + ` AS expires_at
	FROM {n} AS n
	WHERE ` + held("@p4") + `
) AS s
ON l.lease_name = s.lease_name
WHEN MATCHED AND (l.lease_locked = 1 OR l.expires_at <= s.now) THEN UPDATE SET
	holder_id = s.holder_id,
	lease_epoch = l.lease_epoch + 1,
	acquired_at = s.now,
	renewed_at = s.now,
	expires_at = s.expires_at,
	lease_locked = 1
WHEN NOT MATCHED THEN
	INSERT (lease_name, holder_id, lease_epoch, acquired_at, renewed_at, expires_at, lease_locked)
	VALUES (s.lease_name, s.holder_id, 1, s.now, s.now, s.expires_at, 1)
OUTPUT inserted.lease_epoch, inserted.acquired_at, inserted.renewed_at, inserted.expires_at, inserted.acquired_at;`),
		// The store's Renew, exactly, and the lock check in the same
		// statement.
		// A term acquired without the lock that has won it since renews
		// here too, and is marked as held through it from then on.
		renew: strings.Replace(d.Queries.Renew, "SET renewed_at = n.now,", "SET lease_locked = 1, renewed_at = n.now,", 1) + "\n\tAND " + held("@p5"),
		// Checked first: releasing a lock the session does not hold is an
		// error, and the lock may be gone already.
		release: `IF APPLOCK_MODE('public', @p1, 'Session') <> 'NoLock'
	EXEC sp_releaseapplock @Resource = @p1, @LockOwner = 'Session';`,
	}, nil
}

// applockResult interprets sp_getapplock's return code: granted, or not yet
// (err nil: wait again), or an error.
func applockResult(code int) (granted bool, err error) {
	switch code {
	case 0, 1: // granted at once, or after waiting
		return true, nil
	case -1: // timed out: Lock waits again
		return false, nil
	case -2:
		return false, fmt.Errorf("%w: sp_getapplock: the lock request was cancelled (-2)", sqlease.ErrTransient)
	case -3:
		return false, fmt.Errorf("%w: sp_getapplock: the lock request was chosen as a deadlock victim (-3)", sqlease.ErrTransient)
	case -999:
		return false, errors.New("sp_getapplock: parameter validation or other call error (-999)")
	}
	return false, fmt.Errorf("sp_getapplock: unknown return code %d", code)
}

// open opens a session on the lease name: one connection, not yet locked.
func (l *locker) open(ctx context.Context, name string) (sqlease.SessionLock, error) {
	if err := sqlease.ValidateLeaseName(name); err != nil {
		return nil, err
	}
	res := l.resource
	if res == "" {
		res = LockResource(l.prefix, name)
	}
	db, err := Open(l.dsn)
	if err != nil {
		return nil, fmt.Errorf("advisory session for lock %q: %w", res, err)
	}
	// One connection, and nothing that would swap it: database/sql never
	// replaces the connection of a *sql.Conn, so a dead one fails every
	// statement instead of reconnecting to a session without the lock.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("advisory session for lock %q: %w", res, Classify(err))
	}
	var spid int64
	if err := conn.QueryRowContext(ctx, `SELECT @@SPID`).Scan(&spid); err != nil {
		conn.Close()
		db.Close()
		return nil, fmt.Errorf("advisory session for lock %q: %w", res, Classify(err))
	}
	return newSession(db, conn, spid, name, res, l.interval, l.q), nil
}

// session is one advisory-lock session: a dedicated connection and, once
// locked, the goroutine that checks it.
type session struct {
	db       *sql.DB
	conn     *sql.Conn
	spid     int64
	name     string // the lease the session was opened for
	resource string
	interval time.Duration
	q        advisorySQL
	// answerWithin is how long a statement may go unanswered beyond its
	// own wait: checkTimeout, shorter in tests.
	answerWithin time.Duration

	// sem serialises statements on the connection, which runs one request
	// at a time; Close keeps it once taken, so nothing runs after.
	sem chan struct{}
	// life ends when Close gives up on a clean release: it interrupts any
	// statement still running.
	life       context.Context
	cancelLife context.CancelFunc

	lost     chan struct{}
	lostOnce sync.Once
	cause    error // why lost is closed; set before closing it

	locked    atomic.Bool
	mu        sync.Mutex
	closing   bool
	watching  bool
	stop      chan struct{} // closed by Close: the watcher returns
	done      chan struct{} // closed when the watcher returns
	closeOnce sync.Once
}

func newSession(db *sql.DB, conn *sql.Conn, spid int64, name, resource string, interval time.Duration, q advisorySQL) *session {
	life, cancel := context.WithCancel(context.Background())
	return &session{db: db, conn: conn, spid: spid, name: name, resource: resource, interval: interval, q: q,
		answerWithin: checkTimeout, sem: make(chan struct{}, 1), life: life, cancelLife: cancel,
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
}

func (s *session) String() string { return fmt.Sprintf("session %d, lock %q", s.spid, s.resource) }

var errClosed = errors.New("the session was closed")

// lose closes Lost, recording why.
func (s *session) lose(cause error) {
	s.lostOnce.Do(func() {
		s.cause = cause
		close(s.lost)
	})
}

func (s *session) lostErr() error {
	<-s.lost
	return fmt.Errorf("%w: %s: %w", sqlease.ErrSessionLost, s, s.cause)
}

// fail classifies an error of a statement on the session. A broken
// connection, or a statement interrupted before it finished, leaves the
// session in a state no one can vouch for: it is lost.
func (s *session) fail(err error) error {
	if errors.Is(err, sqlease.ErrSessionLost) {
		return err
	}
	if broken(err) {
		s.lose(err)
		return fmt.Errorf("%w: %s: %w", sqlease.ErrSessionLost, s, err)
	}
	return Classify(err)
}

// broken reports an error after which the connection cannot be trusted to
// be the session that took the lock.
func broken(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, sql.ErrConnDone) || errors.Is(err, driver.ErrBadConn) {
		return true
	}
	if _, ok := serverError(err); ok {
		// A fatal server error ends the session; any other leaves it as it
		// was.
		var fatal mssql.ServerError
		return errors.As(err, &fatal)
	}
	return transient(err) // network errors, EOF, a broken TDS stream
}

// exec runs fn on the connection, alone, with a context that Close can
// interrupt. It refuses at once on a lost session.
func (s *session) exec(ctx context.Context, fn func(context.Context, *sql.Conn) error) error {
	select {
	case <-s.lost:
		return s.lostErr()
	default:
	}
	select {
	case s.sem <- struct{}{}:
	case <-s.lost:
		return s.lostErr()
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.sem }()
	select {
	case <-s.lost:
		return s.lostErr()
	default:
	}
	ctx, done := s.bind(ctx)
	defer done()
	return fn(ctx, s.conn)
}

// bind returns ctx, also cancelled when Close ends the session's life.
func (s *session) bind(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.life, cancel)
	return ctx, func() { stop(); cancel() }
}

// Lock implements sqlease.SessionLock: sp_getapplock in waits of at most
// lockWait until it is granted or ctx ends, then a check, in a statement
// of its own, that the session holds the lock — through a pooler that does
// not keep sessions, the check runs on another session and fails. After
// an error from Lock, Close the session: the lock may have been granted as
// the request was interrupted.
func (s *session) Lock(ctx context.Context) error {
	if s.locked.Load() {
		return nil
	}
	for {
		if ctx.Err() != nil {
			return fmt.Errorf("advisory lock: %s: %w", s, context.Cause(ctx))
		}
		wait := lockWait
		if dl, ok := ctx.Deadline(); ok {
			if wait = min(wait, time.Until(dl)); wait <= 0 {
				return fmt.Errorf("advisory lock: %s: %w", s, context.DeadlineExceeded)
			}
		}
		var code int
		err := s.exec(ctx, func(ctx context.Context, c *sql.Conn) error {
			// A wait that outlasts its own timeout by checkTimeout is a
			// connection that stopped answering.
			ctx, cancel := context.WithTimeout(ctx, wait+s.answerWithin)
			defer cancel()
			return c.QueryRowContext(ctx, s.q.lock, s.resource, int32(wait.Milliseconds())).Scan(&code)
		})
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("advisory lock: %s: %w", s, context.Cause(ctx))
			}
			if isLockTimeout(err) {
				continue
			}
			return fmt.Errorf("advisory lock: %s: %w", s, s.fail(err))
		}
		granted, err := applockResult(code)
		if err != nil {
			return fmt.Errorf("advisory lock: %s: %w", s, err)
		}
		if granted {
			break
		}
	}
	var mode string
	if err := s.exec(ctx, func(ctx context.Context, c *sql.Conn) error {
		return c.QueryRowContext(ctx, s.q.holds, s.resource).Scan(&mode)
	}); err != nil {
		return fmt.Errorf("advisory lock: %s: check: %w", s, s.fail(err))
	}
	if mode != exclusive {
		err := fmt.Errorf("the session does not hold the lock it was just granted (APPLOCK_MODE %s) — is a connection pooler that does not keep sessions between sqlease and SQL Server? Connect directly", mode)
		s.lose(err)
		return fmt.Errorf("advisory lock: %s: %w: %w", s, sqlease.ErrSessionLost, err)
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return s.lostErr()
	}
	s.locked.Store(true)
	s.watching = true
	s.mu.Unlock()
	go s.watch()
	return nil
}

// isLockTimeout reports error 1222 (lock request time out period exceeded),
// which sp_getapplock signals by its return code; taken as -1 should a
// server raise it instead.
func isLockTimeout(err error) bool { return hasErrorNumber(err, 1222) }

// watch checks the session every interval until it is lost or closed.
func (s *session) watch() {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.lost:
			return
		case <-t.C:
		}
		s.check()
	}
}

// check asks the server whether the session still holds the lock, and
// loses the session if the answer is no, an error, or late.
func (s *session) check() {
	select {
	case s.sem <- struct{}{}:
	default:
		// A statement is running: it checks the lock itself, and fails if
		// the connection does.
		return
	}
	defer func() { <-s.sem }()
	// Lost closes when the answer is late, not when the driver gives up
	// on it, which takes longer on a dead network.
	late := time.AfterFunc(s.answerWithin, func() {
		s.lose(fmt.Errorf("the lock check got no answer within %s", s.answerWithin))
	})
	ctx, done := s.bind(context.Background())
	ctx, cancel := context.WithTimeout(ctx, s.answerWithin)
	var mode string
	err := s.conn.QueryRowContext(ctx, s.q.holds, s.resource).Scan(&mode)
	cancel()
	done()
	if !late.Stop() {
		return
	}
	select {
	case <-s.stop: // closing: an interrupted check is no loss
		return
	default:
	}
	switch {
	case err != nil:
		s.lose(fmt.Errorf("lock check: %w", err))
	case mode != exclusive:
		s.lose(fmt.Errorf("the session no longer holds its lock (APPLOCK_MODE %s)", mode))
	}
}

// sameLease refuses a lease other than the one whose lock the session was
// opened for: the lock decides who may take over that lease only.
func (s *session) sameLease(name string) error {
	if name != s.name {
		return fmt.Errorf("%w: the advisory session was opened for lease %q, not %q", sqlease.ErrInvalidConfig, s.name, name)
	}
	return nil
}

// Takeover implements sqlease.SessionLock.
func (s *session) Takeover(ctx context.Context, name, holder string, ttl time.Duration) (sqlease.Lease, error) {
	if err := sqlease.ValidateLease(name, holder, ttl); err != nil {
		return sqlease.Lease{}, err
	}
	if err := s.sameLease(name); err != nil {
		return sqlease.Lease{}, err
	}
	l := sqlease.Lease{Name: name, Holder: holder}
	err := s.exec(ctx, func(ctx context.Context, c *sql.Conn) error {
		return c.QueryRowContext(ctx, s.q.takeover, name, holder, ttl.Milliseconds(), s.resource).
			Scan(&l.Epoch, &l.AcquiredAt, &l.RenewedAt, &l.ExpiresAt, &l.ObservedAt)
	})
	if errors.Is(err, sql.ErrNoRows) {
		// An empty source (the lock is gone) or an unexpired lease acquired
		// without the lock: the lock's mode tells.
		mode := ""
		herr := s.exec(ctx, func(ctx context.Context, c *sql.Conn) error {
			return c.QueryRowContext(ctx, s.q.holds, s.resource).Scan(&mode)
		})
		switch {
		case herr != nil:
			return sqlease.Lease{}, fmt.Errorf("take over lease %q: %w", name, s.fail(herr))
		case mode == exclusive:
			return sqlease.Lease{}, fmt.Errorf("take over lease %q: %w: it was acquired without the lock and has not expired", name, sqlease.ErrLeaseHeld)
		}
		s.lose(errors.New("the session no longer holds its lock (takeover)"))
		return sqlease.Lease{}, fmt.Errorf("take over lease %q: %w", name, s.lostErr())
	}
	if err != nil {
		return sqlease.Lease{}, fmt.Errorf("take over lease %q: %w", name, s.fail(err))
	}
	utc(&l)
	return l, nil
}

// Renew implements sqlease.SessionLock: the store's renew, conditioned on
// the lock in the same statement. When it changes nothing, a second
// statement tells a lost lock (ErrSessionLost) from a lost lease
// (ErrLeaseLost).
func (s *session) Renew(ctx context.Context, tok sqlease.Token, ttl time.Duration) (sqlease.Lease, error) {
	if err := sqlease.ValidateLeaseName(tok.Name); err != nil {
		return sqlease.Lease{}, err
	}
	if err := sqlease.ValidateHolderID(tok.Holder); err != nil {
		return sqlease.Lease{}, err
	}
	if tok.Epoch < 1 {
		return sqlease.Lease{}, fmt.Errorf("%w: token epoch must be positive, got %d", sqlease.ErrInvalidName, tok.Epoch)
	}
	if err := sqlease.ValidateTTL(ttl); err != nil {
		return sqlease.Lease{}, err
	}
	if err := s.sameLease(tok.Name); err != nil {
		return sqlease.Lease{}, err
	}
	l := sqlease.Lease{Name: tok.Name, Holder: tok.Holder, Epoch: tok.Epoch}
	mode := ""
	err := s.exec(ctx, func(ctx context.Context, c *sql.Conn) error {
		err := c.QueryRowContext(ctx, s.q.renew, tok.Name, tok.Holder, tok.Epoch, ttl.Milliseconds(), s.resource).
			Scan(&l.AcquiredAt, &l.RenewedAt, &l.ExpiresAt, &l.ObservedAt)
		if errors.Is(err, sql.ErrNoRows) {
			if herr := c.QueryRowContext(ctx, s.q.holds, s.resource).Scan(&mode); herr != nil {
				return herr
			}
		}
		return err
	})
	switch {
	case errors.Is(err, sql.ErrNoRows) && mode != exclusive:
		s.lose(fmt.Errorf("the session no longer holds its lock (APPLOCK_MODE %s at renew)", mode))
		return sqlease.Lease{}, fmt.Errorf("renew lease %s: %w", tok, s.lostErr())
	case errors.Is(err, sql.ErrNoRows):
		return sqlease.Lease{}, fmt.Errorf("renew lease %s: %w", tok, sqlease.ErrLeaseLost)
	case err != nil:
		return sqlease.Lease{}, fmt.Errorf("renew lease %s: %w", tok, s.fail(err))
	}
	utc(&l)
	return l, nil
}

// Lost implements sqlease.SessionLock. It is closed by a failed or late
// check, by any statement that finds the connection broken or the lock
// gone, and by Close.
func (s *session) Lost() <-chan struct{} { return s.lost }

// Close implements sqlease.SessionLock: it releases the lock if held
// (best effort: ending the session frees it anyway) and always closes the
// connection. If ctx ends first, the connection is closed in the
// background and Close returns ctx's error.
func (s *session) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() { err = s.close(ctx) })
	return err
}

func (s *session) close(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	watching := s.watching
	s.mu.Unlock()
	close(s.stop)
	select {
	case <-s.lost: // nothing to release, or no connection to release it on
	default:
		if !s.locked.Load() {
			break
		}
		select {
		case s.sem <- struct{}{}: // kept: nothing runs after the release
			rctx, done := s.bind(ctx)
			_, _ = s.conn.ExecContext(rctx, s.q.release, s.resource)
			done()
		case <-s.lost:
		case <-ctx.Done():
		}
	}
	s.lose(errClosed)
	s.cancelLife()
	closed := make(chan error, 1)
	go func() {
		if watching {
			<-s.done
		}
		err := s.conn.Close()
		if derr := s.db.Close(); err == nil {
			err = derr
		}
		closed <- err
	}()
	select {
	case err := <-closed:
		if err != nil {
			return fmt.Errorf("close advisory %s: %w", s, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close advisory %s: %w (the connection closes in the background)", s, ctx.Err())
	}
}

func utc(l *sqlease.Lease) {
	l.AcquiredAt, l.RenewedAt, l.ExpiresAt, l.ObservedAt = l.AcquiredAt.UTC(), l.RenewedAt.UTC(), l.ExpiresAt.UTC(), l.ObservedAt.UTC()
}
