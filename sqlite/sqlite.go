// Package sqlite is the SQLite dialect of sqlease, on the pure-Go
// modernc.org/sqlite driver. Several processes on one host may share one
// database file: it runs in WAL mode with a busy timeout, and every
// transaction begins IMMEDIATE so that read-then-write transactions (the
// fence) take the write lock up front instead of failing with
// "database is locked" under contention. Within one process a pool's
// writers queue in Go rather than in SQLite's busy handler (gate.go), and
// the log is checkpointed mostly by a connection of the pool's own, beside
// that queue (checkpoint.go).
//
// Times are stored as UTC text "YYYY-MM-DD HH:MM:SS.SSS" (millisecond
// precision, the resolution of SQLite's 'now'), which sorts and compares
// correctly as text and stays readable in the sqlite3 shell.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// DefaultBusyTimeout is how long a statement waits for another connection's
// write lock before failing.
const DefaultBusyTimeout = 5 * time.Second

// DSN returns the driver data source name for the database file at path,
// with WAL, the busy timeout and IMMEDIATE transactions.
func DSN(path string, busyTimeout time.Duration) string {
	if busyTimeout <= 0 {
		busyTimeout = DefaultBusyTimeout
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Set("_txlock", "immediate")
	return "file:" + escapePath(path) + "?" + q.Encode()
}

// escapePath percent-encodes a file path for a file: URI, so that a name
// with %, ?, # or & opens exactly that file and cannot add parameters
// (pragmas) of its own: every byte but letters, digits and / . _ ~ - .
func escapePath(path string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '/', c == '.', c == '_', c == '~', c == '-':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

// Open opens (creating if needed) the SQLite database file at path. The
// pool queues its own writers (gate.go) and checkpoints beside them
// (checkpoint.go); Close stops that too.
func Open(path string) (*sql.DB, error) {
	return open(path, DefaultBusyTimeout, DefaultBusyTimeout)
}

// open is Open with SQLite's busy timeout and the longest wait of a writer
// for this pool's other writers.
func open(path string, busy, gateWait time.Duration) (*sql.DB, error) {
	db, _, err := openWAL(path, busy, gateWait, defaultWAL)
	return db, err
}

// openWAL is open with the checkpoints' settings (checkpoint.go); it
// returns the pool's checkpointer too.
func openWAL(path string, busy, gateWait time.Duration, wal walSettings) (*sql.DB, *checkpointer, error) {
	if path == "" {
		return nil, nil, fmt.Errorf("%w: sqlite database path is empty", sqlease.ErrInvalidConfig)
	}
	conn, err := sqlite.NewConnector(DSN(path, busy) + fmt.Sprintf("&_pragma=wal_autocheckpoint%%28%d%%29", wal.auto))
	if err != nil {
		return nil, nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	gate := newWriteGate(gateWait)
	gate.ckpt = newCheckpointer(conn, wal)
	db := sql.OpenDB(connector{Connector: conn, gate: gate})
	// Processes opening a fresh file at once race to switch it to WAL, and
	// the losers get SQLITE_BUSY at once, whatever the busy timeout: retry
	// the first connection for up to that timeout.
	deadline := time.Now().Add(DefaultBusyTimeout)
	for {
		err := db.Ping()
		if err == nil {
			// Keep connections (and their pragmas) rather than reopen: with
			// 8 kept, a node's 64 concurrent runs opened and closed a
			// connection for most transactions, a fifth of claim mode's
			// CPU (the file opens and pragmas of each new connection).
			return sqlstore.TunePool(db, sqlstore.DefaultMaxIdleConns), gate.ckpt, nil
		}
		if !errors.Is(Classify(err), sqlease.ErrTransient) || time.Now().After(deadline) {
			db.Close()
			return nil, nil, fmt.Errorf("open sqlite %s: %w", path, Classify(err))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// New returns a lease store on db (opened with Open) whose tables are named
// with prefix (e.g. "sqlease" gives sqlease_leases).
func New(db *sql.DB, prefix string) (*sqlstore.Store, error) {
	return sqlstore.NewFor(db, prefix, Dialect)
}

// OpenStore opens the database file at path, applies the migrations and
// returns the store.
func OpenStore(ctx context.Context, path, prefix string) (*sqlstore.Store, error) {
	return sqlstore.OpenFor(ctx, prefix, Dialect, func() (*sql.DB, error) { return Open(path) })
}

const now = `strftime('%Y-%m-%d %H:%M:%f','now')`

// nowPlus adds the millisecond parameter ?N to SQLite's 'now'. 'now' is
// stable within one statement, so every use below sees the same instant.
func nowPlus(param string) string {
	return `strftime('%Y-%m-%d %H:%M:%f','now',(` + param + `/1000.0)||' seconds')`
}

// Dialect returns the SQLite dialect for the table prefix.
func Dialect(prefix string) (sqlstore.Dialect, error) {
	if err := sqlease.ValidateTablePrefix(prefix); err != nil {
		return sqlstore.Dialect{}, err
	}
	r := strings.NewReplacer("{leases}", prefix+"_leases", "{now}", now)
	q := sqlstore.Queries{
		Migrations: []string{r.Replace(`CREATE TABLE IF NOT EXISTS {leases} (
	lease_name  TEXT    NOT NULL PRIMARY KEY,
	holder_id   TEXT    NOT NULL,
	lease_epoch INTEGER NOT NULL,
	acquired_at TEXT    NOT NULL,
	renewed_at  TEXT    NOT NULL,
	expires_at  TEXT    NOT NULL
)`)},
		Acquire: r.Replace(`INSERT INTO {leases} (lease_name, holder_id, lease_epoch, acquired_at, renewed_at, expires_at)
VALUES (?1, ?2, 1, {now}, {now}, ` + nowPlus("?3") + `)
ON CONFLICT (lease_name) DO UPDATE SET
	holder_id = excluded.holder_id,
	lease_epoch = lease_epoch + 1,
	acquired_at = excluded.acquired_at,
	renewed_at = excluded.renewed_at,
	expires_at = excluded.expires_at
WHERE expires_at <= excluded.acquired_at
RETURNING lease_epoch, acquired_at, renewed_at, expires_at, {now}`),
		Renew: r.Replace(`UPDATE {leases} SET renewed_at = {now}, expires_at = ` + nowPlus("?4") + `
WHERE lease_name = ?1 AND holder_id = ?2 AND lease_epoch = ?3 AND expires_at > {now}
RETURNING acquired_at, renewed_at, expires_at, {now}`),
		Release: r.Replace(`UPDATE {leases} SET expires_at = {now}
WHERE lease_name = ?1 AND holder_id = ?2 AND lease_epoch = ?3 AND expires_at > {now}`),
		Get: r.Replace(`SELECT holder_id, lease_epoch, acquired_at, renewed_at, expires_at, {now}
FROM {leases} WHERE lease_name = ?1`),
		List: r.Replace(`SELECT lease_name, holder_id, lease_epoch, acquired_at, renewed_at, expires_at, {now}
FROM {leases} ORDER BY lease_name`),
		// The transaction began IMMEDIATE and so already holds the database's
		// write lock: no acquire can commit until it ends.
		FenceLock: r.Replace(`SELECT 1 FROM {leases}
WHERE lease_name = ?1 AND holder_id = ?2 AND lease_epoch = ?3 AND expires_at > {now}`),
		FenceCheck: r.Replace(`SELECT 1 FROM {leases}
WHERE lease_name = ?1 AND holder_id = ?2 AND lease_epoch = ?3 AND expires_at > {now}`),
		// The jobs tables of older versions lack it (new ones are created
		// with it).
		Columns: []sqlstore.Column{{Table: prefix + "_jobs", Name: "lock_reclaimed",
			Add: "ALTER TABLE " + prefix + "_jobs ADD COLUMN lock_reclaimed INTEGER NOT NULL DEFAULT 0"}},
	}
	q.Columns = append(q.Columns, sqlstore.AddColumns(prefix+"_jobs", "ALTER TABLE "+prefix+"_jobs ADD COLUMN ", addedColumns)...)
	return sqlstore.Dialect{Name: "sqlite", Queries: q, Jobs: jobQueries(prefix), Singletons: singletonQueries(prefix), History: historyQueries(prefix), Revoked: revokedQueries(prefix), Classify: Classify,
		Time: timeArg, IDs: jsonIDs, IsUniqueViolation: isUniqueViolation}, nil
}

// jsonIDs is a list of ids as a JSON array, for json_each.
func jsonIDs(ids []int64) any {
	if len(ids) == 0 {
		return "[]" // json.Marshal writes a nil slice as null
	}
	b, _ := json.Marshal(ids) // []int64 always marshals
	return string(b)
}

// Classify wraps sqlease.ErrTransient around SQLITE_BUSY and SQLITE_LOCKED.
func Classify(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return fmt.Errorf("%w: %w", sqlease.ErrTransient, err)
		}
	}
	return err
}
