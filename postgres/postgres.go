// Package postgres is the PostgreSQL dialect of sqlease, on pgx v5 through
// database/sql. Database time is clock_timestamp() — the current instant, not
// the transaction's start as now() would be.
//
// The fence takes FOR SHARE on the lease row. Acquire's ON CONFLICT DO UPDATE
// and renew's UPDATE both need a conflicting row lock, so neither can commit
// while a fenced transaction is open: keep fenced transactions short, since a
// long one also delays the holder's own renewal. The fence also sets the
// transaction's idle_in_transaction_session_timeout and statement_timeout to
// the lease's remaining time (+100 ms), so a holder frozen inside a fenced
// transaction cannot keep followers out after its lease has expired.
//
// Every epoch it hands out (leases, advisory takeovers, job claims) folds in
// the server's timeline, and a new timeline — a promoted replica that may
// lack the old primary's last writes — holds off new terms for a lease
// duration, so that epochs never repeat or go back across a failover and no
// term of the old timeline acts beside one of the new (timeline.go, which
// also states what holds on each deployment).
package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// Open opens a pool for a postgres:// URL or key=value connection string.
func Open(dsn string) (*sql.DB, error) {
	if dsn == "" {
		return nil, fmt.Errorf("%w: postgres connection string is empty", sqlease.ErrInvalidConfig)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: postgres connection string: %v", sqlease.ErrInvalidConfig, err)
	}
	durableCommits(cfg)
	db := stdlib.OpenDB(*cfg, stdlib.OptionShouldPing(shouldPing),
		stdlib.OptionAfterConnect(stampConn), stdlib.OptionResetSession(resetConn))
	return sqlstore.TunePool(db, sqlstore.DefaultMaxIdleConns), nil
}

// pingAfterIdle is how long a pooled connection may sit idle before it is
// pinged on reuse. pgx pings after one second, which in an idle fleet (a
// renewal every 2 s, a follower's read every few seconds) doubled the
// statements a node sends. Between one second and pingAfterIdle a look at
// the socket without a round trip (connIdleAndOpen: a non-blocking peek)
// replaces the ping: a server that restarted, or a proxy that cut the
// connection, has closed it or left a last message, and the connection is
// then pinged, fails and is replaced before the statement is sent — as
// with pgx's ping. (pgconn's CheckConn, a 1 ms read, missed a restarted
// server's closed connections in tests.)
const pingAfterIdle = 30 * time.Second

func shouldPing(_ context.Context, p stdlib.ShouldPingParams) bool {
	switch {
	case p.IdleDuration <= time.Second:
		return false // in use: as pgx
	case p.IdleDuration > pingAfterIdle:
		return true
	default:
		return !connIdleAndOpen(p.Conn.PgConn().Conn())
	}
}

// durableCommits makes the sessions of cfg commit with synchronous_commit =
// on — their commits wait for the WAL flush — even where the server's
// default is off, unless the connection string sets it explicitly. A 2xx
// means durable (G6), and an acquire or takeover the server forgot in a
// crash would hand its epoch out a second time.
func durableCommits(cfg *pgx.ConnConfig) {
	if _, set := cfg.RuntimeParams["synchronous_commit"]; !set {
		cfg.RuntimeParams["synchronous_commit"] = "on"
	}
}

// New returns a lease store on db whose tables are named with prefix.
func New(db *sql.DB, prefix string) (*sqlstore.Store, error) {
	return sqlstore.NewFor(db, prefix, Dialect)
}

// OpenStore opens a pool for dsn, applies the migrations and returns the store.
func OpenStore(ctx context.Context, dsn, prefix string) (*sqlstore.Store, error) {
	return sqlstore.OpenFor(ctx, prefix, Dialect, func() (*sql.DB, error) { return Open(dsn) })
}

// Dialect returns the PostgreSQL dialect for the table prefix.
func Dialect(prefix string) (sqlstore.Dialect, error) {
	if err := sqlease.ValidateTablePrefix(prefix); err != nil {
		return sqlstore.Dialect{}, err
	}
	r := strings.NewReplacer("{leases}", prefix+"_leases")
	q := sqlstore.Queries{
		Migrations: []string{r.Replace(`CREATE TABLE IF NOT EXISTS {leases} (
	lease_name  varchar(128) NOT NULL PRIMARY KEY,
	holder_id   varchar(128) NOT NULL,
	lease_epoch bigint       NOT NULL,
	acquired_at timestamptz  NOT NULL,
	renewed_at  timestamptz  NOT NULL,
	expires_at  timestamptz  NOT NULL,
	lease_locked boolean     NOT NULL DEFAULT false
)`),
			// A notification with the lease name whenever a lease changes
			// hands or is released (never on a renew), for followers'
			// wake-ups (ListenLeases).
			r.Replace(`CREATE OR REPLACE FUNCTION {leases}_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('{leases}', NEW.lease_name);
	RETURN NULL;
END $$`),
			r.Replace(`CREATE OR REPLACE TRIGGER {leases}_notify_insert AFTER INSERT ON {leases} FOR EACH ROW
EXECUTE FUNCTION {leases}_notify()`),
			r.Replace(`CREATE OR REPLACE TRIGGER {leases}_notify_update AFTER UPDATE ON {leases} FOR EACH ROW
WHEN (OLD.lease_epoch <> NEW.lease_epoch OR OLD.holder_id <> NEW.holder_id OR NEW.expires_at < OLD.expires_at)
EXECUTE FUNCTION {leases}_notify()`),
		},
		// lease_locked: the term was taken through the advisory lock (or
		// renewed through it since), so a later lock winner may depose it;
		// a term acquired without the lock it must leave to expire.
		Columns: []sqlstore.Column{{Table: prefix + "_leases", Name: "lease_locked",
			Add: r.Replace(`ALTER TABLE {leases} ADD COLUMN IF NOT EXISTS lease_locked boolean NOT NULL DEFAULT false`)}},
		// One clock reading per statement, taken in the CTE; the epoch
		// folds in the timeline, and a new timeline holds off (timeline.go).
		Acquire: leaseUpsert(prefix+"_leases", "l.expires_at <= EXCLUDED.acquired_at", "false"),
		Renew: r.Replace(`UPDATE {leases} AS l SET renewed_at = n.now, expires_at = n.now + $4::bigint * interval '1 millisecond'
FROM (SELECT clock_timestamp() AS now) AS n
WHERE l.lease_name = $1 AND l.holder_id = $2 AND l.lease_epoch = $3 AND l.expires_at > n.now AND ` + renewTimeline + `
RETURNING l.acquired_at, l.renewed_at, l.expires_at, n.now`),
		Release: r.Replace(`UPDATE {leases} AS l SET expires_at = n.now
FROM (SELECT clock_timestamp() AS now) AS n
WHERE l.lease_name = $1 AND l.holder_id = $2 AND l.lease_epoch = $3 AND l.expires_at > n.now`),
		Get: r.Replace(`SELECT holder_id, lease_epoch, acquired_at, renewed_at, expires_at, clock_timestamp()
FROM {leases} WHERE lease_name = $1`),
		List: r.Replace(`SELECT lease_name, holder_id, lease_epoch, acquired_at, renewed_at, expires_at, clock_timestamp()
FROM {leases} WHERE lease_name <> '` + timelineMarker + `' ORDER BY lease_name`),
		// Besides locking the row, bound how long this transaction may hold
		// it: a holder paused mid-transaction (SIGSTOP, VM freeze) or a
		// statement running past the lease would otherwise block every
		// follower's acquire until it resumes. Nothing it could still do
		// would commit after expiry anyway (FenceCheck).
		FenceLock: r.Replace(`SELECT set_config('idle_in_transaction_session_timeout', l.ms::text, true),
	set_config('statement_timeout', l.ms::text, true)
FROM (
	SELECT GREATEST(1, CEIL(EXTRACT(EPOCH FROM expires_at - clock_timestamp()) * 1000))::bigint + 100 AS ms
	FROM {leases}
	WHERE lease_name = $1 AND holder_id = $2 AND lease_epoch = $3 AND expires_at > clock_timestamp()
	FOR SHARE
) AS l`),
		// A two-key advisory lock: apart from advisory mode's one-key locks.
		MigrateLock:   `SELECT pg_advisory_lock(hashtext('sqlease.migrate'), hashtext('` + prefix + `'))`,
		MigrateUnlock: `SELECT pg_advisory_unlock(hashtext('sqlease.migrate'), hashtext('` + prefix + `'))`,
		FenceCheck: r.Replace(`SELECT 1 FROM {leases}
WHERE lease_name = $1 AND holder_id = $2 AND lease_epoch = $3 AND expires_at > clock_timestamp()`),
	}
	q.Columns = append(q.Columns, sqlstore.AddColumns(prefix+"_jobs", "ALTER TABLE "+prefix+"_jobs ADD COLUMN IF NOT EXISTS ", addedColumns)...)
	return sqlstore.Dialect{Name: "postgres", Queries: q, Jobs: jobQueries(prefix), Singletons: singletonQueries(prefix), History: historyQueries(prefix), Revoked: revokedQueries(prefix), Classify: Classify, IsUniqueViolation: isUniqueViolation, FenceExpired: fenceExpired, RolledBack: rolledBack}, nil
}

// rolledBack reports a deadlock's victim (40P01) or a serialization
// failure (40001): the transaction is aborted as a whole.
func rolledBack(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// Classify wraps sqlease.ErrTransient around errors worth retrying: lost or
// refused connections (SQLSTATE class 08, EOF, resets, network errors),
// serialization failures and deadlocks, shutdowns and too many connections,
// and a write refused by a read-only server (25006: after a failover; the
// pool then replaces its connections, readonly.go).
func Classify(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "25006":
			readOnlyRefused()
			return fmt.Errorf("%w: %w", sqlease.ErrTransient, err)
		case strings.HasPrefix(pe.Code, "08"),
			pe.Code == "40001", pe.Code == "40P01",
			pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03",
			pe.Code == "53300":
			return fmt.Errorf("%w: %w", sqlease.ErrTransient, err)
		}
		return err
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		errors.As(err, &ne) {
		return fmt.Errorf("%w: %w", sqlease.ErrTransient, err)
	}
	return err
}

// fenceExpired reports the errors by which the fence's own timeouts end a
// transaction: idle_in_transaction_session_timeout (25P03) and
// statement_timeout (57014, "canceling statement due to statement timeout";
// a cancellation from the client has another message).
func fenceExpired(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return pe.Code == "25P03" || (pe.Code == "57014" && strings.Contains(pe.Message, "statement timeout"))
}
