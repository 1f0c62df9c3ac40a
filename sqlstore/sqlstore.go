// Package sqlstore is the one database/sql implementation of
// sqlease.LeaseStore. A dialect (package sqlite, postgres, …) contributes only
// SQL text, in a Queries struct of named fields so that a missing statement
// fails to compile, and the classification of its driver's errors. A database
// without UPDATE … RETURNING (MySQL, MariaDB) writes each statement that
// returns the rows it changes as a WriteRead pair instead.
package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/sqlease/sqlease"
)

// Queries is the SQL text of one dialect for one table prefix. Each field
// documents its arguments in order; a dialect writes its native placeholders.
// Every statement takes "now" from the database clock. Durations are passed as
// integer milliseconds.
type Queries struct {
	// Migrations create the schema; each entry is one statement, applied in
	// order, idempotently (IF NOT EXISTS or equivalent).
	Migrations []string
	// Columns are added to tables created by earlier versions, after
	// Migrations: each is probed first and altered only when missing, so
	// that a node starting on an up-to-date schema never takes the
	// exclusive table lock an ALTER TABLE needs, behind which every renew
	// would queue.
	Columns []Column

	// Acquire: (name, holder, ttl_ms). Inserts the row with epoch 1, or takes
	// over an expired row with epoch + 1, in one statement. Returns one row
	// (lease_epoch, acquired_at, renewed_at, expires_at, now) on success and
	// no row when the lease is held.
	Acquire string
	// AcquireWR replaces Acquire where there is no RETURNING (see WriteRead).
	// Write: (name, holder, ttl_ms), one atomic statement that affects no row
	// while the lease is held. Read: (name, holder), Acquire's row.
	AcquireWR WriteRead
	// Renew: (name, holder, epoch, ttl_ms). Returns one row (acquired_at,
	// renewed_at, expires_at, now) on success, no row otherwise.
	Renew string
	// RenewWR replaces Renew where there is no RETURNING. Write: (ttl_ms,
	// name, holder, epoch). Read: (name), Renew's row.
	RenewWR WriteRead
	// Release: (name, holder, epoch). Sets expires_at to now; checked by rows
	// affected.
	Release string
	// Get: (name). Returns (holder_id, lease_epoch, acquired_at, renewed_at,
	// expires_at, now).
	Get string
	// List: (). Returns (lease_name, holder_id, lease_epoch, acquired_at,
	// renewed_at, expires_at, now) ordered by lease_name.
	List string
	// FenceLock: (name, holder, epoch). Inside a transaction: returns a row
	// only if the token holds the unexpired lease, and locks the row against
	// writers (acquire, renew of another epoch) until the transaction ends.
	FenceLock string
	// FenceCheck: (name, holder, epoch). Inside the same transaction, just
	// before commit: returns a row only if the lease is still unexpired.
	FenceCheck string
	// FenceLimit: (), optional. Run right after FenceLock where a database
	// can bound the fenced transaction only through session settings, not
	// transaction-local ones (MariaDB): it sets them so that the database
	// ends a transaction that outlives the lease, typically from values
	// FenceLock left in session variables. FenceLimitReset: (), run on the
	// same connection after the transaction ends, restores them before the
	// connection goes back to the pool (which discards it if that fails).
	FenceLimit, FenceLimitReset string

	// MigrateLock and MigrateUnlock, when set, bracket Migrate on one
	// connection: where concurrent CREATE … IF NOT EXISTS of one table can
	// fail (PostgreSQL), a fleet starting at once on a fresh database then
	// migrates one node after the other.
	MigrateLock, MigrateUnlock string
}

// Column is a column added to an existing table.
type Column struct {
	// Table and Name identify it; they are the dialect's own (quoted where
	// it needs), built from a validated prefix.
	Table, Name string
	// Add is the statement that adds it (ALTER TABLE … ADD …).
	Add string
}

// Dialect is what a database contributes to the store.
type Dialect struct {
	// Name is the dialect's short name: sqlite, postgres, sqlserver, mysql.
	Name string
	// Queries are the statements for the configured prefix.
	Queries Queries
	// Classify maps a driver error to a domain error: it wraps
	// sqlease.ErrTransient for errors worth retrying and returns others
	// unchanged. Nil means no classification.
	Classify func(error) error
	// TxOptions are used for fenced transactions and the store's own
	// (nil: driver default).
	TxOptions *sql.TxOptions
	// Jobs are the scheduler's statements.
	Jobs JobQueries
	// Singletons are the statements of package singleton.
	Singletons SingletonQueries
	// History are the statements of the leadership history.
	History HistoryQueries
	// Revoked are the statements of the dashboard's revoked sessions.
	Revoked RevokedQueries
	// Time converts a time parameter for the driver; nil passes time.Time
	// in UTC. SQLite needs its text form so that comparisons stay textual.
	Time func(time.Time) any
	// IDs converts a list of job ids for the driver where it takes no
	// arrays (SQLite: JSON text for json_each); nil passes []int64.
	IDs func([]int64) any
	// FenceExpired reports an error by which the database ended a fenced
	// transaction because the lease's remaining time ran out (PostgreSQL's
	// fence sets session timeouts to it); Fenced then reports
	// ErrFenceFailed.
	FenceExpired func(error) bool
	// IsUniqueViolation reports a unique-key violation.
	IsUniqueViolation func(error) bool
	// RolledBack reports an error after which the server has rolled the
	// whole transaction back of its own accord (a deadlock's victim, a
	// serialization failure): nothing of it was written, so running it
	// again is safe. The store does so for its own transactions (inTx).
	// Nil: never.
	RolledBack func(error) bool
}

// Migrations are the dialect's schema statements in the order Migrate
// applies them: lease, scheduler, singleton, history, then revoked
// session tables.
func (d Dialect) Migrations() []string {
	out := append([]string{}, d.Queries.Migrations...)
	out = append(out, d.Jobs.Migrations...)
	out = append(out, d.Singletons.Migrations...)
	out = append(out, d.History.Migrations...)
	return append(out, d.Revoked.Migrations...)
}

// Columns are the columns Migrate adds to tables of earlier versions when
// they lack them: the lease's, then the singletons'.
func (d Dialect) Columns() []Column {
	return append(append([]Column{}, d.Queries.Columns...), d.Singletons.Columns...)
}

// Store implements sqlease.LeaseStore on a *sql.DB.
type Store struct {
	db *sql.DB
	d  Dialect
}

var _ sqlease.LeaseStore = (*Store)(nil)

// New returns a Store for db speaking dialect d. It does not touch the
// database; call Migrate to create the schema.
func New(db *sql.DB, d Dialect) *Store { return &Store{db: db, d: d} }

// DB returns the underlying pool.
func (s *Store) DB() *sql.DB { return s.db }

// Dialect returns the store's dialect.
func (s *Store) Dialect() Dialect { return s.d }

// Migrate applies the dialect's migrations (lease, scheduler, then singleton tables) in
// order. They are idempotent.
func (s *Store) Migrate(ctx context.Context) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlease: %s migrations: %w", s.d.Name, s.classify(err))
	}
	defer conn.Close()
	if q := s.d.Queries.MigrateLock; q != "" {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("sqlease: %s migrations: take the migration lock: %w", s.d.Name, s.classify(err))
		}
		// Closing the session would free it as well.
		defer conn.ExecContext(context.WithoutCancel(ctx), s.d.Queries.MigrateUnlock)
	}
	for i, stmt := range s.d.Migrations() {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("sqlease: %s migration %d: %w", s.d.Name, i+1, s.classify(err))
		}
	}
	for _, c := range s.d.Columns() {
		if hasColumn(ctx, conn, c) {
			continue
		}
		if _, err := conn.ExecContext(ctx, c.Add); err != nil && !hasColumn(ctx, conn, c) {
			// Not a process that added it first (where there is no
			// migration lock, SQLite).
			return fmt.Errorf("sqlease: %s migration: add column %s.%s: %w", s.d.Name, c.Table, c.Name, s.classify(err))
		}
	}
	return nil
}

// hasColumn probes for c, outside a transaction: a failed probe must not
// abort one.
func hasColumn(ctx context.Context, conn *sql.Conn, c Column) bool {
	rows, err := conn.QueryContext(ctx, "SELECT "+c.Name+" FROM "+c.Table+" WHERE 1 = 0")
	if err == nil {
		err = rows.Close()
	}
	return err == nil
}

func (s *Store) classify(err error) error {
	if err == nil || errors.Is(err, sql.ErrNoRows) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if s.d.Classify != nil {
		err = s.d.Classify(err)
	}
	return storageError{err}
}

// affected is the count of rows an Exec changed, with the Exec's error or
// RowsAffected's classified: res, err := q.ExecContext(…) as one call.
func (s *Store) affected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, s.classify(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, s.classify(err)
	}
	return n, nil
}

// storageError marks a database's error as sqlease.ErrStorage; its text
// and chain are the error's own.
type storageError struct{ err error }

func (e storageError) Error() string        { return e.err.Error() }
func (e storageError) Unwrap() error        { return e.err }
func (e storageError) Is(target error) bool { return target == sqlease.ErrStorage }

func validateToken(tok sqlease.Token) error {
	if err := sqlease.ValidateLeaseName(tok.Name); err != nil {
		return err
	}
	if err := sqlease.ValidateHolderID(tok.Holder); err != nil {
		return err
	}
	if tok.Epoch < 1 {
		return fmt.Errorf("%w: token epoch must be positive, got %d", sqlease.ErrInvalidName, tok.Epoch)
	}
	return nil
}

// Acquire implements sqlease.LeaseStore.
func (s *Store) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (sqlease.Lease, error) {
	if err := sqlease.ValidateLease(name, holder, ttl); err != nil {
		return sqlease.Lease{}, err
	}
	l := sqlease.Lease{Name: name, Holder: holder}
	var acq, ren, exp, now dbTime
	ms := ttl.Milliseconds()
	n, err := s.query(ctx, nil, returning{
		query: s.d.Queries.Acquire, args: []any{name, holder, ms},
		wr: s.d.Queries.AcquireWR, write: []any{name, holder, ms}, read: []any{name, holder},
	}, func(sc scanner) error { return sc.Scan(&l.Epoch, &acq, &ren, &exp, &now) })
	if err != nil {
		return sqlease.Lease{}, fmt.Errorf("acquire lease %q: %w", name, err)
	}
	if n == 0 {
		return sqlease.Lease{}, fmt.Errorf("acquire lease %q: %w", name, sqlease.ErrLeaseHeld)
	}
	l.AcquiredAt, l.RenewedAt, l.ExpiresAt, l.ObservedAt = acq.T, ren.T, exp.T, now.T
	return l, nil
}

// Renew implements sqlease.LeaseStore.
func (s *Store) Renew(ctx context.Context, tok sqlease.Token, ttl time.Duration) (sqlease.Lease, error) {
	if err := validateToken(tok); err != nil {
		return sqlease.Lease{}, err
	}
	if err := sqlease.ValidateTTL(ttl); err != nil {
		return sqlease.Lease{}, err
	}
	l := sqlease.Lease{Name: tok.Name, Holder: tok.Holder, Epoch: tok.Epoch}
	var acq, ren, exp, now dbTime
	ms := ttl.Milliseconds()
	n, err := s.query(ctx, nil, returning{
		query: s.d.Queries.Renew, args: []any{tok.Name, tok.Holder, tok.Epoch, ms},
		wr: s.d.Queries.RenewWR, write: []any{ms, tok.Name, tok.Holder, tok.Epoch}, read: []any{tok.Name},
	}, func(sc scanner) error { return sc.Scan(&acq, &ren, &exp, &now) })
	if err != nil {
		return sqlease.Lease{}, fmt.Errorf("renew lease %s: %w", tok, err)
	}
	if n == 0 {
		return sqlease.Lease{}, fmt.Errorf("renew lease %s: %w", tok, sqlease.ErrLeaseLost)
	}
	l.AcquiredAt, l.RenewedAt, l.ExpiresAt, l.ObservedAt = acq.T, ren.T, exp.T, now.T
	return l, nil
}

// Release implements sqlease.LeaseStore.
func (s *Store) Release(ctx context.Context, tok sqlease.Token) error {
	if err := validateToken(tok); err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, s.d.Queries.Release, tok.Name, tok.Holder, tok.Epoch)
	if err != nil {
		return fmt.Errorf("release lease %s: %w", tok, s.classify(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("release lease %s: %w", tok, s.classify(err))
	}
	if n == 0 {
		return fmt.Errorf("release lease %s: %w", tok, sqlease.ErrLeaseLost)
	}
	return nil
}

// Lease implements sqlease.LeaseStore.
func (s *Store) Lease(ctx context.Context, name string) (sqlease.Lease, error) {
	if err := sqlease.ValidateLeaseName(name); err != nil {
		return sqlease.Lease{}, err
	}
	l := sqlease.Lease{Name: name}
	var acq, ren, exp, now dbTime
	err := s.db.QueryRowContext(ctx, s.d.Queries.Get, name).
		Scan(&l.Holder, &l.Epoch, &acq, &ren, &exp, &now)
	if errors.Is(err, sql.ErrNoRows) {
		return sqlease.Lease{}, fmt.Errorf("read lease %q: %w", name, sqlease.ErrNoLease)
	}
	if err != nil {
		return sqlease.Lease{}, fmt.Errorf("read lease %q: %w", name, s.classify(err))
	}
	l.AcquiredAt, l.RenewedAt, l.ExpiresAt, l.ObservedAt = acq.T, ren.T, exp.T, now.T
	return l, nil
}

// Leases implements sqlease.LeaseStore.
func (s *Store) Leases(ctx context.Context) ([]sqlease.Lease, error) {
	rows, err := s.db.QueryContext(ctx, s.d.Queries.List)
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", s.classify(err))
	}
	defer rows.Close()
	var out []sqlease.Lease
	for rows.Next() {
		var l sqlease.Lease
		var acq, ren, exp, now dbTime
		if err := rows.Scan(&l.Name, &l.Holder, &l.Epoch, &acq, &ren, &exp, &now); err != nil {
			return nil, fmt.Errorf("list leases: %w", s.classify(err))
		}
		l.AcquiredAt, l.RenewedAt, l.ExpiresAt, l.ObservedAt = acq.T, ren.T, exp.T, now.T
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list leases: %w", s.classify(err))
	}
	return out, nil
}

// Fenced implements sqlease.LeaseStore. A failed fence — the lease check
// before fn or before commit, or the database ending the transaction
// because the lease ran out — wraps sqlease.ErrFenceFailed; fn's own errors
// (a job lock lost inside it: ErrLeaseLost) come back as fn made them.
func (s *Store) Fenced(ctx context.Context, tok sqlease.Token, fn func(*sql.Tx) error) error {
	if err := validateToken(tok); err != nil {
		return err
	}
	begin := s.db.BeginTx
	if s.d.Queries.FenceLimitReset != "" {
		// FenceLimit's session settings outlive the transaction: run it on
		// a connection of its own, reset before it goes back to the pool.
		conn, err := s.db.Conn(ctx)
		if err != nil {
			return fmt.Errorf("fenced write under %s: begin: %w", tok, s.classify(err))
		}
		defer s.resetSession(ctx, conn)
		begin = conn.BeginTx
	}
	tx, err := begin(ctx, s.d.TxOptions)
	if err != nil {
		return fmt.Errorf("fenced write under %s: begin: %w", tok, s.classify(err))
	}
	// Roll back on every path that does not commit, including a panic or
	// runtime.Goexit in fn: an abandoned transaction would keep the lease
	// row (postgres) or the whole database (sqlite) locked. After a commit,
	// Rollback is a no-op returning sql.ErrTxDone.
	defer func() { _ = tx.Rollback() }()
	if err := s.fence(ctx, tx, s.d.Queries.FenceLock, tok); err != nil {
		return err
	}
	if s.d.Queries.FenceLimit != "" {
		if _, err := tx.ExecContext(ctx, s.d.Queries.FenceLimit); err != nil {
			return s.fenceExpired(tok, fmt.Errorf("fenced write under %s: %w", tok, s.classify(err)))
		}
	}
	if err := fn(tx); err != nil {
		return s.fenceExpired(tok, err)
	}
	if err := s.fence(ctx, tx, s.d.Queries.FenceCheck, tok); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return s.fenceExpired(tok, fmt.Errorf("fenced write under %s: commit: %w", tok, s.classify(err)))
	}
	return nil
}

// resetTimeout bounds FenceLimitReset.
const resetTimeout = 5 * time.Second

// resetSession runs FenceLimitReset on conn and returns it to the pool, or
// discards it when the reset fails, so that no later user of the connection
// inherits the fence's session settings.
func (s *Store) resetSession(ctx context.Context, conn *sql.Conn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resetTimeout)
	defer cancel()
	if _, err := conn.ExecContext(ctx, s.d.Queries.FenceLimitReset); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = conn.Close()
}

// fenceExpired adds ErrFenceFailed to an error that means the database
// ended the fenced transaction because its lease ran out
// (Dialect.FenceExpired).
func (s *Store) fenceExpired(tok sqlease.Token, err error) error {
	if s.d.FenceExpired != nil && s.d.FenceExpired(err) && !errors.Is(err, sqlease.ErrFenceFailed) {
		return fmt.Errorf("fenced write under %s: %w: the transaction outlived the lease: %w", tok, sqlease.ErrFenceFailed, err)
	}
	return err
}

func (s *Store) fence(ctx context.Context, tx *sql.Tx, query string, tok sqlease.Token) error {
	// The row's content is the dialect's business; its presence is the fence.
	rows, err := tx.QueryContext(ctx, query, tok.Name, tok.Holder, tok.Epoch)
	if err == nil {
		found := rows.Next()
		err = rows.Close()
		if err == nil && !found {
			err = sql.ErrNoRows
		}
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("fenced write under %s: %w", tok, sqlease.ErrFenceFailed)
	}
	if err != nil {
		return s.fenceExpired(tok, fmt.Errorf("fenced write under %s: %w", tok, s.classify(err)))
	}
	return nil
}

// DefaultMaxIdleConns is how many idle connections the server dialects'
// Open keeps. database/sql keeps only 2 by default, so a node running dozens
// of jobs at once opened and closed a connection for almost every statement
// — on PostgreSQL a new server process each time, which held claim-mode
// throughput to ~60 jobs/s on a 2-core machine. The number of open
// connections is left unlimited: a cap would make the leader's renew queue
// behind its own runs. Cap it with db.SetMaxOpenConns where a fleet must
// stay within the server's connection limit.
const DefaultMaxIdleConns = 64 // scheduler.DefaultMaxConcurrent runs of an unbatched store, each holding one at a time

// TunePool keeps up to n idle connections, each closed after five idle
// minutes.
func TunePool(db *sql.DB, n int) *sql.DB {
	db.SetMaxIdleConns(n)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return db
}

// NewFor returns a Store on db speaking the dialect that dialect makes for
// prefix: every dialect's New. Its error (an invalid prefix) comes back as
// it is, before anything else is done.
func NewFor(db *sql.DB, prefix string, dialect func(prefix string) (Dialect, error)) (*Store, error) {
	d, err := dialect(prefix)
	if err != nil {
		return nil, err
	}
	return New(db, d), nil
}

// OpenFor is OpenMigrated for the dialect that dialect makes for prefix:
// every dialect's OpenStore. An invalid prefix fails before open is called.
func OpenFor(ctx context.Context, prefix string, dialect func(prefix string) (Dialect, error), open func() (*sql.DB, error)) (*Store, error) {
	d, err := dialect(prefix)
	if err != nil {
		return nil, err
	}
	return OpenMigrated(ctx, open, d)
}

// OpenMigrated opens a pool with open, builds the store for dialect d on it
// and applies the migrations, closing the pool if that fails. It is every
// dialect's OpenStore.
func OpenMigrated(ctx context.Context, open func() (*sql.DB, error), d Dialect) (*Store, error) {
	db, err := open()
	if err != nil {
		return nil, err
	}
	s := New(db, d)
	if err := s.Migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}
