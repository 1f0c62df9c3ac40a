package sqlserver

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/golang-sql/civil"
	mssql "github.com/microsoft/go-mssqldb"
	"github.com/microsoft/go-mssqldb/azuread"
	"github.com/microsoft/go-mssqldb/msdsn"
	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// MaxDuration is the longest lease, lock timeout, backoff or retention the
// statements can add to a time: 2^31-1 seconds, about 68 years. DATEADD
// takes an int, which holds only about 24.8 days of milliseconds, so the
// statements add a duration's whole seconds and its remaining milliseconds
// separately. A longer duration fails in the database with an arithmetic
// overflow error.
const MaxDuration = (1<<31 - 1) * time.Second

// Open opens a pool for a SQL Server or Azure SQL connection string, in any
// form the driver accepts: sqlserver://user:pass@host:port?database=db, ADO
// (server=…;user id=…) or odbc:…. A connection string with a fedauth
// parameter (see [UsesEntraID]) is opened through the driver's azuread
// package, so that fedauth=ActiveDirectoryDefault signs in with Azure's
// default credential chain (environment, workload identity, managed
// identity, Azure CLI) and needs no stored password.
//
// Open checks the connection string but does not connect. It returns an
// error wrapping sqlease.ErrInvalidConfig for an empty or malformed string
// and for a timezone parameter other than UTC (sqlease reads every datetime2
// as UTC); error messages carry the string only through [Redact].
func Open(dsn string) (*sql.DB, error) {
	if strings.TrimSpace(dsn) == "" {
		return nil, fmt.Errorf("%w: sqlserver connection string is empty", sqlease.ErrInvalidConfig)
	}
	cfg, err := msdsn.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: sqlserver connection string %s: %v", sqlease.ErrInvalidConfig, Redact(dsn), err)
	}
	if tz := cfg.Encoding.GetTimezone(); tz != time.UTC {
		return nil, fmt.Errorf("%w: sqlserver connection string %s: timezone=%s: sqlease stores and reads times as UTC; remove the timezone parameter",
			sqlease.ErrInvalidConfig, Redact(dsn), tz)
	}
	var c *mssql.Connector
	if UsesEntraID(dsn) {
		c, err = azuread.NewConnector(dsn)
	} else {
		c, err = mssql.NewConnector(dsn)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: sqlserver connection string %s: %v", sqlease.ErrInvalidConfig, Redact(dsn), err)
	}
	return sqlstore.TunePool(sql.OpenDB(c), sqlstore.DefaultMaxIdleConns), nil
}

// DriverName returns the database/sql driver name that opens dsn the way
// [Open] does: azuread.DriverName ("azuresql") when it uses Entra ID,
// "sqlserver" otherwise. It is for callers that must use sql.Open.
func DriverName(dsn string) string {
	if UsesEntraID(dsn) {
		return azuread.DriverName
	}
	return "sqlserver"
}

// New returns a lease store on db whose tables are named with prefix (e.g.
// "sqlease" gives [sqlease_leases]). It returns an error wrapping
// sqlease.ErrInvalidName for an invalid prefix.
func New(db *sql.DB, prefix string) (*sqlstore.Store, error) {
	return sqlstore.NewFor(db, prefix, Dialect)
}

// OpenStore opens a pool for dsn, applies the migrations and returns the
// store.
func OpenStore(ctx context.Context, dsn, prefix string) (*sqlstore.Store, error) {
	return sqlstore.OpenFor(ctx, prefix, Dialect, func() (*sql.DB, error) { return Open(dsn) })
}

// binary is the collation of every identifier column (lease names, holder
// ids, job names, client keys): exact, case-sensitive comparison by code
// point, as on PostgreSQL and SQLite, whatever the database's default
// collation. Like every SQL Server collation it ignores trailing spaces in
// comparisons; lease names, holder ids and job names cannot contain spaces.
const binary = "COLLATE Latin1_General_100_BIN2"

// nowTable is the derived table that reads the database clock once per
// statement: every use of n.now in a statement sees the same instant.
const nowTable = "(SELECT SYSUTCDATETIME() AS now)"

// addMS returns T-SQL that adds ms, a bigint count of milliseconds, to t.
// DATEADD's number is an int (±24.8 days of milliseconds), so the whole
// seconds and the remainder are added separately; see MaxDuration. T-SQL's
// integer division and remainder both truncate toward zero, so negative
// counts add up too.
func addMS(ms, t string) string {
	return "DATEADD(millisecond, CAST((" + ms + ") % 1000 AS int), DATEADD(second, CAST((" + ms + ") / 1000 AS int), " + t + "))"
}

// msParam is a millisecond parameter as a bigint, also when it is NULL
// (which the driver sends as nvarchar).
func msParam(p string) string { return "CAST(" + p + " AS bigint)" }

// quote returns the bracket-quoted name of one of the prefix's tables. The
// prefix is validated (lower-case letters, digits, underscores), so the
// brackets are belt and braces.
func quote(name string) string { return "[" + name + "]" }

// Dialect returns the SQL Server dialect for the table prefix. It returns an
// error wrapping sqlease.ErrInvalidName for an invalid prefix.
func Dialect(prefix string) (sqlstore.Dialect, error) {
	if err := sqlease.ValidateTablePrefix(prefix); err != nil {
		return sqlstore.Dialect{}, err
	}
	leases := prefix + "_leases"
	r := strings.NewReplacer("{leases}", quote(leases), "{leases_pk}", quote(leases+"_pk"), "{leases_locked_df}", quote(leases+"_locked_df"),
		"{bin}", binary, "{n}", nowTable)
	q := sqlstore.Queries{
		Migrations: []string{r.Replace(`IF OBJECT_ID(N'{leases}', N'U') IS NULL
CREATE TABLE {leases} (
	lease_name  nvarchar(128) {bin} NOT NULL,
	holder_id   nvarchar(128) {bin} NOT NULL,
	lease_epoch bigint        NOT NULL,
	acquired_at datetime2(7)  NOT NULL,
	renewed_at  datetime2(7)  NOT NULL,
	expires_at  datetime2(7)  NOT NULL,
	lease_locked bit          NOT NULL CONSTRAINT {leases_locked_df} DEFAULT 0,
	CONSTRAINT {leases_pk} PRIMARY KEY (lease_name)
)`)},
		// lease_locked: the term was taken or renewed through the advisory
		// lock (see the session's takeover).
		Columns: []sqlstore.Column{{Table: quote(leases), Name: "lease_locked",
			Add: r.Replace(`ALTER TABLE {leases} ADD lease_locked bit NOT NULL CONSTRAINT {leases_locked_df} DEFAULT 0`)}},
		// One statement, one clock reading (s.now). UPDLOCK, HOLDLOCK makes
		// the read of the target serializable with update locks: the row,
		// or the key range where it would be inserted, stays locked from
		// the read to the write, so concurrent acquirers of one name queue
		// and exactly one of them finds it missing or expired.
		Acquire: r.Replace(`MERGE INTO {leases} WITH (UPDLOCK, HOLDLOCK) AS l
USING (
	SELECT @p1 AS lease_name, @p2 AS holder_id, n.now, ` + addMS(msParam("@p3"), "n.now") + ` AS expires_at
	FROM {n} AS n
) AS s
ON l.lease_name = s.lease_name
WHEN MATCHED AND l.expires_at <= s.now THEN UPDATE SET
	holder_id = s.holder_id,
	lease_epoch = l.lease_epoch + 1,
	acquired_at = s.now,
	renewed_at = s.now,
	expires_at = s.expires_at,
	lease_locked = 0
WHEN NOT MATCHED THEN
	INSERT (lease_name, holder_id, lease_epoch, acquired_at, renewed_at, expires_at)
	VALUES (s.lease_name, s.holder_id, 1, s.now, s.now, s.expires_at)
OUTPUT inserted.lease_epoch, inserted.acquired_at, inserted.renewed_at, inserted.expires_at, inserted.acquired_at;`),
		Renew: r.Replace(`UPDATE l SET renewed_at = n.now, expires_at = ` + addMS(msParam("@p4"), "n.now") + `
OUTPUT inserted.acquired_at, inserted.renewed_at, inserted.expires_at, inserted.renewed_at
FROM {leases} AS l WITH (UPDLOCK, HOLDLOCK)
CROSS JOIN {n} AS n
WHERE l.lease_name = @p1 AND l.holder_id = @p2 AND l.lease_epoch = @p3 AND l.expires_at > n.now`),
		Release: r.Replace(`UPDATE l SET expires_at = n.now
FROM {leases} AS l WITH (UPDLOCK, HOLDLOCK)
CROSS JOIN {n} AS n
WHERE l.lease_name = @p1 AND l.holder_id = @p2 AND l.lease_epoch = @p3 AND l.expires_at > n.now`),
		// Reads take no lock (READUNCOMMITTED): under locking read
		// committed they would queue behind an acquire that waits for a
		// fenced transaction, for as long as that transaction stays open.
		// The lease row is only ever written by single autocommit
		// statements, so a read can at worst see one such write a moment
		// before it commits. Nothing decides on these reads alone: Acquire,
		// Renew and Fenced re-check under lock.
		Get: r.Replace(`SELECT holder_id, lease_epoch, acquired_at, renewed_at, expires_at, SYSUTCDATETIME()
FROM {leases} WITH (READUNCOMMITTED) WHERE lease_name = @p1`),
		List: r.Replace(`SELECT lease_name, holder_id, lease_epoch, acquired_at, renewed_at, expires_at, SYSUTCDATETIME()
FROM {leases} WITH (READUNCOMMITTED) ORDER BY lease_name`),
		// A shared lock on the lease row, held to the end of the
		// transaction (REPEATABLEREAD), also where the database reads
		// committed rows from versions (READ_COMMITTED_SNAPSHOT): Acquire's
		// and Renew's update locks cannot become the exclusive locks they
		// need to write until the fenced transaction ends.
		FenceLock: r.Replace(`SELECT 1 FROM {leases} WITH (REPEATABLEREAD, ROWLOCK)
WHERE lease_name = @p1 AND holder_id = @p2 AND lease_epoch = @p3 AND expires_at > SYSUTCDATETIME()`),
		// Concurrent IF OBJECT_ID(…) IS NULL CREATE TABLE can race: a
		// session application lock makes a fleet migrate one at a time.
		MigrateLock:   r.Replace(`EXEC sp_getapplock N'{leases}', 'Exclusive', 'Session', 60000`),
		MigrateUnlock: r.Replace(`EXEC sp_releaseapplock N'{leases}', 'Session'`),
		FenceCheck: r.Replace(`SELECT 1 FROM {leases} WITH (REPEATABLEREAD, ROWLOCK)
WHERE lease_name = @p1 AND holder_id = @p2 AND lease_epoch = @p3 AND expires_at > SYSUTCDATETIME()`),
	}
	q.Columns = append(q.Columns, sqlstore.AddColumns(quote(prefix+"_jobs"), "ALTER TABLE "+quote(prefix+"_jobs")+" ADD ", addedColumns)...)
	return sqlstore.Dialect{Name: "sqlserver", Queries: q, Jobs: jobQueries(prefix), Singletons: singletonQueries(prefix), History: historyQueries(prefix), Revoked: revokedQueries(prefix), Classify: Classify,
		Time: timeArg, IsUniqueViolation: IsUniqueViolation, RolledBack: rolledBack}, nil
}

// timeArg sends a time parameter as datetime2(7), the columns' type, rather
// than the driver's default datetimeoffset, so that comparisons need no
// conversion and equality with a stored time is exact.
func timeArg(t time.Time) any { return civil.DateTimeOf(t.UTC()) }

// transientNumbers are SQL Server and Azure SQL error numbers worth
// retrying: the connection or the database went away for a moment, the
// service throttled the request, or the statement lost a lock conflict.
// Login failures (18456) and permission, syntax and constraint errors are
// not on the list: retrying them cannot help.
var transientNumbers = map[int32]string{
	20:    "the instance does not support encryption (DBNETLIB; seen during failover)",
	64:    "connection lost during login",
	121:   "semaphore timeout (network)",
	233:   "connection closed before login",
	921:   "database not recovered yet",
	941:   "database not started",
	952:   "database in transition",
	1204:  "cannot obtain a lock resource",
	1205:  "deadlock victim",
	1222:  "lock request timeout",
	3960:  "snapshot update conflict",
	3966:  "version store transaction rolled back",
	4060:  "cannot open database (Azure: database moving or starting)",
	4221:  "read-secondary login waiting for versioning",
	8628:  "timeout waiting to optimize the query",
	8645:  "timeout waiting for memory resources",
	8651:  "memory grant unavailable",
	10053: "transport error: connection aborted",
	10054: "transport error: connection reset",
	10060: "network error: connection timed out",
	10928: "resource limit reached",
	10929: "resource minimum guarantee not available",
	10936: "elastic pool request limit reached",
	17197: "login timed out under load",
	18401: "server in script upgrade mode (after failover)",
	40143: "service error processing the request",
	40189: "resource quota exceeded for this window",
	40197: "service error processing the request (reconfiguration, failover)",
	40501: "service busy",
	40540: "service error processing the request",
	40613: "database not currently available",
	40623: "reauthentication failed; retry login",
	42108: "SQL pool paused",
	42109: "SQL pool warming up",
	49918: "not enough resources to process the request",
	49919: "too many create or update operations",
	49920: "too many operations in progress",
}

// Classify wraps sqlease.ErrTransient around errors worth retrying: the
// error numbers above (Azure SQL's transient faults, deadlocks, lock and
// resource timeouts), a connection the server closed after a fatal error,
// a broken TDS stream, and lost or refused connections (driver.ErrBadConn,
// network errors, resets, io.EOF). It returns other errors unchanged,
// among them the caller's own context cancellations and deadlines: those
// are not the database's fault and must not count as an outage.
func Classify(err error) error {
	if err == nil || errors.Is(err, sqlease.ErrTransient) || !transient(err) {
		return err
	}
	return fmt.Errorf("%w: %w", sqlease.ErrTransient, err)
}

func transient(err error) bool {
	// context.DeadlineExceeded is also a net.Error; the caller's own
	// deadline or cancellation is not the database's fault.
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if me, ok := serverError(err); ok {
		var fatal mssql.ServerError
		if errors.As(err, &fatal) {
			return true // the server closed the connection
		}
		for _, n := range errorNumbers(me) {
			if _, ok := transientNumbers[n]; ok {
				return true
			}
		}
		return false
	}
	var stream mssql.StreamError
	var ne net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.As(err, &ne) || errors.As(err, &stream)
}

// serverError finds a SQL Server error in err's chain, sent by value (as the
// driver does) or by pointer.
func serverError(err error) (mssql.Error, bool) {
	var me mssql.Error
	if errors.As(err, &me) {
		return me, true
	}
	var pe *mssql.Error
	if errors.As(err, &pe) && pe != nil {
		return *pe, true
	}
	return mssql.Error{}, false
}

// errorNumbers lists the numbers of every error the server sent for the
// request: the driver describes the last one and keeps them all in All.
func errorNumbers(me mssql.Error) []int32 {
	ns := []int32{me.Number}
	for _, e := range me.All {
		ns = append(ns, e.Number)
	}
	return ns
}

// IsUniqueViolation reports a duplicate key in a unique index (2601) or a
// primary key or unique constraint (2627).
func IsUniqueViolation(err error) bool { return hasErrorNumber(err, 2601, 2627) }

// rolledBack reports a deadlock's victim (1205) or a snapshot update
// conflict (3960): the server rolls the whole transaction back.
func rolledBack(err error) bool { return hasErrorNumber(err, 1205, 3960) }

// hasErrorNumber reports whether err is a server error carrying one of the
// numbers, in its first message or any other.
func hasErrorNumber(err error, numbers ...int32) bool {
	me, ok := serverError(err)
	if !ok {
		return false
	}
	for _, n := range errorNumbers(me) {
		if slices.Contains(numbers, n) {
			return true
		}
	}
	return false
}
