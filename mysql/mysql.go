// Package mysql is the MySQL and MariaDB dialect of sqlease, on
// github.com/go-sql-driver/mysql through database/sql. It is tested on
// MariaDB 10.11 and written for MariaDB 10.6+ and MySQL 8.0.4+ (it needs
// SKIP LOCKED, and JSON_TABLE for batch finishes); where MySQL behaves
// differently, this says so.
//
// Database time is UTC_TIMESTAMP(6): microseconds, UTC whatever the session
// time zone, and fixed at the start of each statement, so every use in one
// statement sees the same instant. (A statement that waits for a lock has
// read the clock before the wait: an acquire judges expiry at the instant it
// started, which only makes it more cautious.) Times are stored in
// datetime(6) columns, always UTC; durations are passed as milliseconds and
// added with DATE_ADD(…, INTERVAL ms * 1000 MICROSECOND).
//
// Neither database has UPDATE … RETURNING, so each statement that returns
// the rows it writes is a sqlstore.WriteRead pair: a conditional write checked
// by rows affected, then a read of the row it wrote, in the same transaction.
// Acquire is one INSERT … ON DUPLICATE KEY UPDATE that takes the row over
// only if it has expired; InnoDB serializes acquirers and renewers on the
// row's lock, and each evaluates its condition on the row as the previous one
// committed it, so concurrent acquirers have exactly one winner and an
// acquire racing a renew cannot both succeed. Due jobs are claimed by locking
// them with SELECT … FOR UPDATE SKIP LOCKED and claiming each by id.
//
// Fenced transactions and the store's own run at READ COMMITTED, as they do
// by default on PostgreSQL: at InnoDB's default REPEATABLE READ, gap locks
// make concurrent runs' bookkeeping transactions deadlock.
//
// The fence takes a shared lock (LOCK IN SHARE MODE) on the lease row; acquire
// and renew need an exclusive one, so neither can commit while a fenced
// transaction is open. Keep fenced transactions short: a long one also delays
// the holder's own renewal. MariaDB has no transaction-local timeouts, so the
// fence bounds a frozen holder (SIGSTOP, VM freeze) with session settings that
// the store resets when the transaction ends: idle_transaction_timeout, whole
// seconds, makes the server close the connection of a transaction left idle
// for longer than the lease's remaining time rounded up to a second, plus one
// second; max_statement_time ends a statement that runs past the lease's
// remaining time (+100 ms). A follower thus waits at most about two seconds
// past the lease's expiry for a holder frozen in a fenced transaction, whose
// transaction is rolled back and, when it resumes, fails with a lost
// connection (a transient error) or ErrLeaseLost. MySQL has neither setting
// (the statement writes them in MariaDB-only comments): there, a frozen
// holder keeps followers out until the server drops its idle connection
// (wait_timeout, 8 hours by default).
package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// DefaultPort is the port of a URL that names none.
const DefaultPort = "3306"

// fixed are the driver settings the dialect relies on, as DSN parameters
// with the values DSN sets (it refuses a URL that sets them otherwise):
// parseTime and loc make datetime columns scan as UTC time.Time; time_zone
// makes the session's NOW() agree with UTC_TIMESTAMP(); interpolateParams=false
// sends arguments as prepared statement parameters, never spliced into the
// SQL text; multiStatements=false runs one statement per call;
// clientFoundRows=false makes rows affected count changed rows, which
// Acquire's INSERT … ON DUPLICATE KEY UPDATE relies on to tell a refusal (0)
// from a takeover.
var fixed = []struct{ name, value string }{
	{"parseTime", "true"},
	{"loc", "UTC"},
	{"time_zone", "'+00:00'"},
	{"interpolateParams", "false"},
	{"multiStatements", "false"},
	{"clientFoundRows", "false"},
}

// DSN converts a URL of the form
//
//	mysql://user:password@host:port/database?param=value&…
//
// (port 3306 when omitted; user, password and database percent-encoded as
// URLs require; parameters as the driver documents them, e.g. tls=true,
// timeout=5s, or any system variable) into the driver's data source name,
// adding parseTime=true, loc=UTC, time_zone='+00:00', interpolateParams=false,
// multiStatements=false and clientFoundRows=false. It returns an error
// wrapping sqlease.ErrInvalidConfig for a malformed URL, one without host or
// database, or one that sets those parameters, or autocommit, to anything
// else. Errors never include the password.
func DSN(rawURL string) (string, error) {
	cfg, err := config(rawURL)
	if err != nil {
		return "", err
	}
	return cfg.FormatDSN(), nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: mysql URL: %s", sqlease.ErrInvalidConfig, fmt.Sprintf(format, args...))
}

func config(rawURL string) (*mysql.Config, error) {
	if rawURL == "" {
		return nil, fmt.Errorf("%w: mysql URL is empty", sqlease.ErrInvalidConfig)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error quotes the whole URL, password and all
		}
		return nil, invalid("%v", err)
	}
	switch {
	case u.Scheme != "mysql":
		return nil, invalid("want the scheme mysql://, got %q", u.Scheme)
	case u.Opaque != "" || u.Hostname() == "":
		return nil, invalid("no host in %s", u.Redacted())
	case u.Fragment != "":
		return nil, invalid("unexpected fragment in %s", u.Redacted())
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	if dbName == "" || strings.Contains(dbName, "/") {
		return nil, invalid("want one database name as the path of %s", u.Redacted())
	}
	params, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, invalid("parameters: %v", err)
	}
	for _, f := range fixed {
		for _, v := range params[f.name] {
			if !sameSetting(v, f.value) {
				return nil, invalid("%s=%s: sqlease needs %s=%s", f.name, v, f.name, f.value)
			}
		}
		delete(params, f.name)
	}
	for _, v := range params["autocommit"] {
		if !sameSetting(v, "1") {
			return nil, invalid("autocommit=%s: sqlease needs autocommit on", v)
		}
	}
	dsn := "/"
	if len(params) > 0 {
		dsn += "?" + params.Encode()
	}
	// The driver's default logger is replaced once (useDriverLogger) before
	// any config reads it: ParseDSN racing with SetLogger was a data race.
	installDriverLogger.Do(func() { _ = mysql.SetLogger(slogDriverLogger{}) })
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, invalid("parameters: %v", err)
	}
	port := u.Port()
	if port == "" {
		port = DefaultPort
	}
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net = "tcp"
	cfg.Addr = net.JoinHostPort(u.Hostname(), port)
	cfg.DBName = dbName
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = false
	cfg.MultiStatements = false
	cfg.ClientFoundRows = false
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	return cfg, nil
}

// sameSetting compares two parameter values, booleans by meaning.
func sameSetting(got, want string) bool {
	norm := func(v string) string {
		switch strings.ToLower(v) {
		case "1", "true", "on":
			return "true"
		case "0", "false", "off":
			return "false"
		}
		return v
	}
	return norm(got) == norm(want) || (want == "'+00:00'" && got == "+00:00")
}

// Open opens a pool for a mysql:// URL (see DSN). The driver's own messages
// go to log/slog (SetDriverLogger), not to standard error.
func Open(rawURL string) (*sql.DB, error) {
	dsn, err := DSN(rawURL)
	if err != nil {
		return nil, err
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("open mysql: %w", err)
	}
	useDriverLogger(cfg)
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("open mysql: %w", err)
	}
	return sqlstore.TunePool(sql.OpenDB(sessionConnector{c}), sqlstore.DefaultMaxIdleConns), nil
}

// idleTransactionLimit is run on every new connection (MariaDB only: the
// setting is in a comment only MariaDB executes): the server ends a
// transaction of the pool left idle for more than a second. A process
// paused in the middle of a write-then-read transaction on the lease row
// (an acquire or a renew: without RETURNING they are two statements)
// would otherwise hold the row's lock for as long as it is paused, and
// keep every follower from taking the lease over after it expires. The
// store's transactions send their statements back to back; a fenced one
// gets a limit of its own from its lease (FenceLimit) and is reset to this
// one after (FenceLimitReset).
const idleTransactionLimit = `SET /*M!100300 SESSION idle_transaction_timeout = 1, */ @sqlease_fence_ms = NULL`

// sessionConnector runs idleTransactionLimit on each new connection, and
// makes it keep its prepared statements (stmtConn).
type sessionConnector struct{ driver.Connector }

func (c sessionConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := conn.(driver.ExecerContext)
	if !ok {
		conn.Close()
		return nil, errors.New("mysql: the driver's connection cannot execute statements")
	}
	if _, err := ex.ExecContext(ctx, idleTransactionLimit, nil); err != nil {
		conn.Close()
		return nil, err
	}
	// The session's own level, so that a transaction at it needs no SET
	// of its own (stmtConn.BeginTx): a round trip less per transaction.
	if _, err := ex.ExecContext(ctx, `SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED`, nil); err != nil {
		conn.Close()
		return nil, err
	}
	sc, err := newStmtConn(conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	sc.readCommitted = true
	return sc, nil
}

// New returns a lease store on db whose tables are named with prefix. db
// must be opened with Open, or with the settings DSN adds.
func New(db *sql.DB, prefix string) (*sqlstore.Store, error) {
	return sqlstore.NewFor(db, prefix, Dialect)
}

// OpenStore opens a pool for a mysql:// URL, applies the migrations and
// returns the store.
func OpenStore(ctx context.Context, rawURL, prefix string) (*sqlstore.Store, error) {
	return sqlstore.OpenFor(ctx, prefix, Dialect, func() (*sql.DB, error) { return Open(rawURL) })
}

// now is the database clock.
const now = `UTC_TIMESTAMP(6)`

// plusMS adds ms, a millisecond argument or column, to the time t.
func plusMS(t, ms string) string {
	return `DATE_ADD(` + t + `, INTERVAL (` + ms + `) * 1000 MICROSECOND)`
}

// tableOptions make names and holder ids compare byte for byte, as on the
// other databases, whatever the server's default character set.
const tableOptions = `ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`

// Dialect returns the MySQL/MariaDB dialect for the table prefix.
func Dialect(prefix string) (sqlstore.Dialect, error) {
	if err := sqlease.ValidateTablePrefix(prefix); err != nil {
		return sqlstore.Dialect{}, err
	}
	r := strings.NewReplacer("{leases}", prefix+"_leases", "{now}", now, "{options}", tableOptions)
	q := sqlstore.Queries{
		Migrations: []string{r.Replace(`CREATE TABLE IF NOT EXISTS {leases} (
	lease_name  varchar(128) NOT NULL PRIMARY KEY,
	holder_id   varchar(128) NOT NULL,
	lease_epoch bigint       NOT NULL,
	acquired_at datetime(6)  NOT NULL,
	renewed_at  datetime(6)  NOT NULL,
	expires_at  datetime(6)  NOT NULL,
	lease_locked tinyint(1)  NOT NULL DEFAULT 0
) {options}`)},
		// lease_locked: the term was taken or renewed through the advisory
		// lock (see the session's takeover).
		Columns: []sqlstore.Column{{Table: prefix + "_leases", Name: "lease_locked",
			Add: r.Replace(`ALTER TABLE {leases} ADD COLUMN lease_locked tinyint(1) NOT NULL DEFAULT 0`)}},
		// ON DUPLICATE KEY UPDATE assigns left to right and each assignment
		// sees the columns already assigned: expires_at, which every
		// condition reads, comes last. Rows affected: 1 inserted, 2 taken
		// over, 0 refused (clientFoundRows=false).
		AcquireWR: sqlstore.WriteRead{
			Write: r.Replace(`INSERT INTO {leases} (lease_name, holder_id, lease_epoch, acquired_at, renewed_at, expires_at)
VALUES (?, ?, 1, {now}, {now}, ` + plusMS(now, "?") + `)
ON DUPLICATE KEY UPDATE
	holder_id   = IF(expires_at <= VALUES(acquired_at), VALUES(holder_id), holder_id),
	lease_epoch = IF(expires_at <= VALUES(acquired_at), lease_epoch + 1, lease_epoch),
	acquired_at = IF(expires_at <= VALUES(acquired_at), VALUES(acquired_at), acquired_at),
	renewed_at  = IF(expires_at <= VALUES(acquired_at), VALUES(renewed_at), renewed_at),
	lease_locked = IF(expires_at <= VALUES(acquired_at), 0, lease_locked),
	expires_at  = IF(expires_at <= VALUES(acquired_at), VALUES(expires_at), expires_at)`),
			// The write's clock reading is acquired_at. The holder check
			// is redundant with rows affected, except on a pool opened with
			// clientFoundRows, where a refusal counts one row: there it
			// turns another holder's lease into an error, never a success.
			Read: r.Replace(`SELECT lease_epoch, acquired_at, renewed_at, expires_at, acquired_at
FROM {leases} WHERE lease_name = ? AND holder_id = ?`),
		},
		RenewWR: sqlstore.WriteRead{
			Write: r.Replace(`UPDATE {leases} SET renewed_at = {now}, expires_at = ` + plusMS(now, "?") + `
WHERE lease_name = ? AND holder_id = ? AND lease_epoch = ? AND expires_at > {now}`),
			Read: r.Replace(`SELECT acquired_at, renewed_at, expires_at, renewed_at FROM {leases} WHERE lease_name = ?`),
		},
		Release: r.Replace(`UPDATE {leases} SET expires_at = {now}
WHERE lease_name = ? AND holder_id = ? AND lease_epoch = ? AND expires_at > {now}`),
		Get: r.Replace(`SELECT holder_id, lease_epoch, acquired_at, renewed_at, expires_at, {now}
FROM {leases} WHERE lease_name = ?`),
		List: r.Replace(`SELECT lease_name, holder_id, lease_epoch, acquired_at, renewed_at, expires_at, {now}
FROM {leases} ORDER BY lease_name`),
		// Keeps the lease's remaining milliseconds for FenceLimit.
		FenceLock: r.Replace(`SELECT @sqlease_fence_ms := GREATEST(1, CEIL(TIMESTAMPDIFF(MICROSECOND, {now}, expires_at) / 1000))
FROM {leases}
WHERE lease_name = ? AND holder_id = ? AND lease_epoch = ? AND expires_at > {now}
LOCK IN SHARE MODE`),
		// The settings are MariaDB's, in a comment only MariaDB (10.3+)
		// executes; on MySQL this only clears the variable.
		FenceLimit: `SET /*M!100300 SESSION idle_transaction_timeout = CEIL(@sqlease_fence_ms / 1000) + 1,
	SESSION max_statement_time = @sqlease_fence_ms / 1000 + 0.1, */ @sqlease_fence_ms = NULL`,
		FenceLimitReset: `SET /*M!100300 SESSION idle_transaction_timeout = 1,
	SESSION max_statement_time = DEFAULT, */ @sqlease_fence_ms = NULL`,
		FenceCheck: r.Replace(`SELECT 1 FROM {leases}
WHERE lease_name = ? AND holder_id = ? AND lease_epoch = ? AND expires_at > {now}
LOCK IN SHARE MODE`),
	}
	q.Columns = append(q.Columns, sqlstore.AddColumns(prefix+"_jobs", "ALTER TABLE "+prefix+"_jobs ADD COLUMN ", addedColumns)...)
	return sqlstore.Dialect{Name: "mysql", Queries: q, Jobs: jobQueries(prefix), Singletons: singletonQueries(prefix), History: historyQueries(prefix), Revoked: revokedQueries(prefix), Classify: Classify,
		TxOptions: &sql.TxOptions{Isolation: sql.LevelReadCommitted},
		Time:      timeArg, IsUniqueViolation: isUniqueViolation, FenceExpired: fenceExpired, RolledBack: rolledBack}, nil
}

// Server error numbers.
const (
	errConCount           = 1040 // ER_CON_COUNT_ERROR: too many connections
	errServerShutdown     = 1053 // ER_SERVER_SHUTDOWN
	errDupEntry           = 1062 // ER_DUP_ENTRY
	errTooManyUserConns   = 1203 // ER_TOO_MANY_USER_CONNECTIONS
	errLockWaitTimeout    = 1205 // ER_LOCK_WAIT_TIMEOUT
	errLockDeadlock       = 1213 // ER_LOCK_DEADLOCK
	errConnectionKilled   = 1927 // ER_CONNECTION_KILLED (MariaDB)
	errStatementTimeout   = 1969 // ER_STATEMENT_TIMEOUT: max_statement_time exceeded (MariaDB)
	errServerGone         = 2006 // CR_SERVER_GONE_ERROR, as a proxy may report it
	errServerLost         = 2013 // CR_SERVER_LOST
	errInteractionTimeout = 4031 // ER_CLIENT_INTERACTION_TIMEOUT: idle connection closed
)

// Classify wraps sqlease.ErrTransient around errors worth retrying: lost or
// refused connections (driver.ErrBadConn, mysql.ErrInvalidConn, network
// errors, server gone or shutting down, connection killed, idle timeout),
// deadlocks, lock wait timeouts and too many connections.
func Classify(err error) error {
	if err == nil || errors.Is(err, sqlease.ErrTransient) || !transient(err) {
		return err
	}
	return fmt.Errorf("%w: %w", sqlease.ErrTransient, err)
}

func transient(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case errConCount, errServerShutdown, errTooManyUserConns, errLockWaitTimeout, errLockDeadlock,
			errConnectionKilled, errServerGone, errServerLost, errInteractionTimeout:
			return true
		}
		return false
	}
	var ne net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) || errors.As(err, &ne)
}

// rolledBack reports a deadlock's victim: InnoDB rolls its whole
// transaction back (ER_LOCK_DEADLOCK). A lock wait timeout (1205) is not
// one: it rolls back only the statement, unless innodb_rollback_on_timeout.
func rolledBack(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errLockDeadlock
}

// isUniqueViolation reports ER_DUP_ENTRY.
func isUniqueViolation(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errDupEntry
}

// fenceExpired reports max_statement_time, which the fence sets to the
// lease's remaining time, ending a statement. (A transaction the server
// closed for idling past the lease surfaces as a lost connection, which
// cannot be told from others.)
func fenceExpired(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errStatementTimeout
}
