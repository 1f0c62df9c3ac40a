// Package ledger is a test-only action ledger and invariant checker.
//
// Every time a test actor does leader-only work it appends one row — holder,
// fencing epoch, database time, a free-form note — inside the fenced
// transaction that guards the work (Append). Afterwards Check reads the whole
// ledger back in id order and fails if the rows could only have been written
// by two actors at once:
//
//   - two holders wrote under the same epoch (KindTwoHolders);
//   - the epoch went down from one row to the next (KindEpochBackwards), or a
//     row carries an epoch lower than one that already appeared earlier
//     (KindStaleEpoch) — a stale leader's write interleaved with its
//     successor's;
//   - a row of epoch e was written, in database time, after the first row of
//     a higher epoch (KindWriteAfterNewerEpoch) — caught even when ids are
//     allocated out of commit order;
//   - with a leases table given, a row carries an epoch the lease never
//     reached (KindUnknownEpoch), or the current epoch under another holder
//     than the lease row's (KindHolderMismatch).
//
// Ids are assigned by the database (AUTOINCREMENT, bigserial, AUTO_INCREMENT,
// IDENTITY). SQLite assigns them in commit order; the others at insert time,
// which matches commit order for rows written under a lease fence (a fenced
// transaction keeps every other epoch's acquire from committing until it
// ends), and the database-time check covers what the id order cannot.
//
// CheckOccurrences (occurrence.go) is the same for a scheduler's
// occurrences: one success each, a retry only after a recorded failure, the
// executors' reports against the runs and an execs table. Unran is the other
// half of "nothing done twice or not at all": the accepted work that never
// ran.
//
// The ledger lives in the table sqlease_test_ledger, so use one database (or
// SQLite file) per test. Supported dialects: "sqlite", "postgres", and —
// untested here, for later use — "mysql" and "sqlserver".
package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/sqlease/sqlease/internal/dbtime"
)

// Table is the name of the ledger table.
const Table = "sqlease_test_ledger"

type dialectSQL struct {
	migrate []string
	append  string // (holder, epoch, note); db_time from the database clock
}

var dialects = map[string]dialectSQL{
	"sqlite": {
		migrate: []string{`CREATE TABLE IF NOT EXISTS ` + Table + ` (
	id      INTEGER PRIMARY KEY AUTOINCREMENT,
	holder  TEXT    NOT NULL,
	epoch   INTEGER NOT NULL,
	db_time TEXT    NOT NULL,
	note    TEXT    NOT NULL DEFAULT ''
)`},
		append: `INSERT INTO ` + Table + ` (holder, epoch, db_time, note)
VALUES (?1, ?2, strftime('%Y-%m-%d %H:%M:%f','now'), ?3)`,
	},
	"postgres": {
		migrate: []string{`CREATE TABLE IF NOT EXISTS ` + Table + ` (
	id      bigserial   PRIMARY KEY,
	holder  text        NOT NULL,
	epoch   bigint      NOT NULL,
	db_time timestamptz NOT NULL,
	note    text        NOT NULL DEFAULT ''
)`},
		append: `INSERT INTO ` + Table + ` (holder, epoch, db_time, note) VALUES ($1, $2, clock_timestamp(), $3)`,
	},
	// MySQL and SQL Server: written for later dialects, not exercised yet.
	"mysql": {
		migrate: []string{`CREATE TABLE IF NOT EXISTS ` + Table + ` (
	id      BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
	holder  VARCHAR(128) NOT NULL,
	epoch   BIGINT       NOT NULL,
	db_time DATETIME(6)  NOT NULL,
	note    VARCHAR(512) NOT NULL DEFAULT ''
)`},
		append: `INSERT INTO ` + Table + ` (holder, epoch, db_time, note) VALUES (?, ?, UTC_TIMESTAMP(6), ?)`,
	},
	"sqlserver": {
		migrate: []string{`IF OBJECT_ID(N'dbo.` + Table + `', N'U') IS NULL
CREATE TABLE dbo.` + Table + ` (
	id      BIGINT IDENTITY(1,1) NOT NULL PRIMARY KEY,
	holder  NVARCHAR(128) NOT NULL,
	epoch   BIGINT        NOT NULL,
	db_time DATETIME2(7)  NOT NULL,
	note    NVARCHAR(512) NOT NULL DEFAULT N''
)`},
		append: `INSERT INTO dbo.` + Table + ` (holder, epoch, db_time, note) VALUES (@p1, @p2, SYSUTCDATETIME(), @p3)`,
	},
}

func lookup(dialect string) (dialectSQL, error) {
	d, ok := dialects[dialect]
	if !ok {
		return dialectSQL{}, fmt.Errorf("ledger: unknown dialect %q (want sqlite, postgres, mysql or sqlserver)", dialect)
	}
	return d, nil
}

// Migrate creates the ledger table if it does not exist.
func Migrate(ctx context.Context, db *sql.DB, dialect string) error {
	d, err := lookup(dialect)
	if err != nil {
		return err
	}
	for _, stmt := range d.migrate {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("ledger: migrate (%s): %w", dialect, err)
		}
	}
	return nil
}

// Append records one action by holder under epoch, stamped with the database
// clock. Call it inside the fenced transaction that guards the action.
func Append(ctx context.Context, tx *sql.Tx, dialect, holder string, epoch int64, note string) error {
	d, err := lookup(dialect)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, d.append, holder, epoch, note); err != nil {
		return fmt.Errorf("ledger: append (%s, epoch %d): %w", holder, epoch, err)
	}
	return nil
}

// Row is one ledger row. DBTime is UTC.
type Row struct {
	ID     int64
	Holder string
	Epoch  int64
	DBTime time.Time
	Note   string
}

func (r Row) String() string {
	return fmt.Sprintf("#%d %s@%d %s %q", r.ID, r.Holder, r.Epoch, r.DBTime.Format("15:04:05.000000"), r.Note)
}

// Rows reads the whole ledger in id order.
func Rows(ctx context.Context, db *sql.DB, dialect string) ([]Row, error) {
	if _, err := lookup(dialect); err != nil {
		return nil, err
	}
	return query(ctx, db, "read", `SELECT id, holder, epoch, db_time, note FROM `+Table+` ORDER BY id`, func(rows *sql.Rows, r *Row) error {
		var ts Time
		err := rows.Scan(&r.ID, &r.Holder, &r.Epoch, &ts, &r.Note)
		r.DBTime = ts.T
		return err
	})
}

// query reads every row of q, each by scan; what names the read in its
// errors.
func query[T any](ctx context.Context, db *sql.DB, what, q string, scan func(*sql.Rows, *T) error) ([]T, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("ledger: %s: %w", what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, fmt.Errorf("ledger: %s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger: %s: %w", what, err)
	}
	return out, nil
}

// LeaseRow is the part of a lease row Check compares the ledger with.
type LeaseRow struct {
	Name   string
	Holder string
	Epoch  int64
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// Leases reads (lease_name, holder_id, lease_epoch) from a sqlease leases
// table such as "sqlease_leases".
func Leases(ctx context.Context, db *sql.DB, leasesTable string) ([]LeaseRow, error) {
	if !identRE.MatchString(leasesTable) {
		return nil, fmt.Errorf("ledger: leases table %q is not a plain identifier", leasesTable)
	}
	return query(ctx, db, "read leases", `SELECT lease_name, holder_id, lease_epoch FROM `+leasesTable+` ORDER BY lease_name`, func(rows *sql.Rows, l *LeaseRow) error {
		return rows.Scan(&l.Name, &l.Holder, &l.Epoch)
	})
}

// Check reads the ledger and, if leasesTable is not empty, the leases table,
// and returns an *Error listing every violation found, or nil.
func Check(ctx context.Context, db *sql.DB, dialect, leasesTable string) error {
	rows, err := Rows(ctx, db, dialect)
	if err != nil {
		return err
	}
	var leases []LeaseRow
	if leasesTable != "" {
		if leases, err = Leases(ctx, db, leasesTable); err != nil {
			return err
		}
	}
	if v := Verify(rows, leases); len(v) > 0 {
		return &Error{Violations: v, Rows: len(rows)}
	}
	return nil
}

// Kinds of violation.
const (
	KindBadRow               = "bad_row"
	KindTwoHolders           = "two_holders_one_epoch"
	KindEpochBackwards       = "epoch_backwards"
	KindStaleEpoch           = "stale_epoch_interleaved"
	KindWriteAfterNewerEpoch = "write_after_newer_epoch"
	KindUnknownEpoch         = "epoch_beyond_lease"
	KindHolderMismatch       = "holder_differs_from_lease"
)

// Violation is one broken invariant with the rows that show it.
type Violation struct {
	Kind string
	Msg  string
	Rows []Row
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", v.Kind, v.Msg)
	for _, r := range v.Rows {
		fmt.Fprintf(&b, "\n      %s", r)
	}
	return b.String()
}

// Error is returned by Check when the ledger breaks an invariant.
type Error struct {
	Violations []Violation
	Rows       int // rows checked
}

// maxListed bounds the violations printed by Error.
const maxListed = 25

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ledger: %d violation(s) in %d rows:", len(e.Violations), e.Rows)
	for i, v := range e.Violations {
		if i == maxListed {
			fmt.Fprintf(&b, "\n  … and %d more", len(e.Violations)-maxListed)
			break
		}
		fmt.Fprintf(&b, "\n  - %s", v)
	}
	return b.String()
}

// Has reports whether e holds a violation of the kind.
func (e *Error) Has(kind string) bool {
	for _, v := range e.Violations {
		if v.Kind == kind {
			return true
		}
	}
	return false
}

// Kinds returns the distinct kinds of violation in e, sorted.
func (e *Error) Kinds() []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range e.Violations {
		if !seen[v.Kind] {
			seen[v.Kind] = true
			out = append(out, v.Kind)
		}
	}
	sort.Strings(out)
	return out
}

// AsError returns err as an *Error if it is one.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// Verify checks rows (in id order, as Rows returns them) against the
// invariants and, when leases is not nil, against the lease rows. It returns
// the violations found, in row order.
func Verify(rows []Row, leases []LeaseRow) []Violation {
	var out []Violation
	add := func(kind string, msg string, rs ...Row) {
		out = append(out, Violation{Kind: kind, Msg: msg, Rows: rs})
	}

	sorted := true
	for i := 1; i < len(rows); i++ {
		if rows[i].ID <= rows[i-1].ID {
			sorted = false
		}
	}
	if !sorted {
		rows = append([]Row(nil), rows...)
		sort.SliceStable(rows, func(i, j int) bool { return rows[i].ID < rows[j].ID })
	}

	firstOf := map[int64]Row{} // epoch -> its first row (by id)
	var maxRow Row             // first row of the highest epoch seen so far
	for i, r := range rows {
		if r.Epoch < 1 || r.Holder == "" || r.DBTime.IsZero() {
			add(KindBadRow, "row without a positive epoch, a holder and a database time", r)
			continue
		}
		if f, ok := firstOf[r.Epoch]; !ok {
			firstOf[r.Epoch] = r
		} else if f.Holder != r.Holder {
			add(KindTwoHolders, fmt.Sprintf("epoch %d written by %q and by %q", r.Epoch, f.Holder, r.Holder), f, r)
		}
		if i > 0 && r.Epoch < rows[i-1].Epoch && rows[i-1].Epoch > 0 {
			add(KindEpochBackwards, fmt.Sprintf("epoch went from %d down to %d in id order", rows[i-1].Epoch, r.Epoch), rows[i-1], r)
		} else if maxRow.Epoch > r.Epoch {
			add(KindStaleEpoch, fmt.Sprintf("write under epoch %d after epoch %d had already written (stale leader interleaved)", r.Epoch, maxRow.Epoch), maxRow, r)
		}
		if r.Epoch > maxRow.Epoch {
			maxRow = r
		}
	}

	// For every epoch, the earliest database time at which any higher epoch
	// wrote its first row; a row written after that is a stale write.
	epochs := make([]int64, 0, len(firstOf))
	for e := range firstOf {
		epochs = append(epochs, e)
	}
	sort.Slice(epochs, func(i, j int) bool { return epochs[i] > epochs[j] })
	type newer struct {
		ok  bool
		row Row // first row of the higher epoch that started earliest
	}
	above := map[int64]newer{}
	var cur newer
	for _, e := range epochs { // descending
		above[e] = cur
		f := firstOf[e]
		if !cur.ok || f.DBTime.Before(cur.row.DBTime) {
			cur = newer{ok: true, row: f}
		}
	}
	for _, r := range rows {
		if r.Epoch < 1 || r.DBTime.IsZero() {
			continue
		}
		if n := above[r.Epoch]; n.ok && r.DBTime.After(n.row.DBTime) {
			add(KindWriteAfterNewerEpoch, fmt.Sprintf("epoch %d wrote at %s, %s after epoch %d had begun writing",
				r.Epoch, r.DBTime.Format(time.RFC3339Nano), r.DBTime.Sub(n.row.DBTime), n.row.Epoch), n.row, r)
		}
	}

	if leases != nil {
		var maxLease int64
		for _, l := range leases {
			maxLease = max(maxLease, l.Epoch)
		}
		for _, e := range epochs {
			if e > maxLease {
				add(KindUnknownEpoch, fmt.Sprintf("epoch %d is beyond every lease row (highest lease_epoch %d)", e, maxLease), firstOf[e])
			}
		}
		if len(leases) == 1 {
			l := leases[0]
			for _, r := range rows {
				if r.Epoch == l.Epoch && r.Holder != l.Holder {
					add(KindHolderMismatch, fmt.Sprintf("epoch %d is held by %q in the lease row %q", l.Epoch, l.Holder, l.Name), r)
				}
			}
		}
	}
	return out
}

// Time scans a timestamp as the drivers return it: time.Time (pgx, mssql,
// mysql with parseTime) or text (SQLite, mysql without parseTime). T is UTC.
// It is the one timestamp scanner of the test checkers (this ledger and
// the execs tables of the occurrence checker).
type Time struct{ T time.Time }

// Scan implements sql.Scanner: NULL is the zero time.
func (a *Time) Scan(v any) error {
	t, _, err := dbtime.Scan(v)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	a.T = t
	return nil
}
