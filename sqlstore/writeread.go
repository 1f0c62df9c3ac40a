package sqlstore

import (
	"context"
	"database/sql"
	"errors"
)

// WriteRead stands in for a statement that returns the rows it writes
// (UPDATE … RETURNING, INSERT … ON CONFLICT … RETURNING) on a database that
// has no such statement: MySQL and MariaDB. A dialect sets the WriteRead
// field next to the statement (AcquireWR for Acquire, …) and leaves the
// statement itself empty.
//
// The store runs Write and then, if it affected a row, Read, in one
// transaction: the caller's where the statement belongs to one (ClaimJob in a
// fenced transaction), else a new one with Dialect.TxOptions. Write is checked
// by rows affected: none means the statement returned no row (the lease is
// held, the job is not due, the name is taken) and Read is not run. Read then
// selects what RETURNING would have returned. The rows it reads are the ones
// Write just changed, still write-locked by the transaction, so Read sees them
// as written at any isolation level, and nothing else can change them before
// the commit.
//
// MySQL counts rows changed, not rows matched: a Write that can match a row
// without changing any of its values reports no row, so a Write that must
// count such a row has to change it (see SetPausedWR).
//
// Positional placeholders (?) take each argument once and in order, so a
// Write may need the statement's arguments in another order, or one twice;
// each WriteRead field documents the arguments of its Write and its Read.
type WriteRead struct {
	Write string
	Read  string
}

// returning is one execution of a statement that returns rows, in both forms:
// query with args where the dialect has RETURNING; wr, with the arguments of
// its Write and its Read, where the dialect set it instead.
type returning struct {
	query       string
	args        []any
	wr          WriteRead
	write, read []any
}

// errReadLost reports a Read that found none of the rows its Write changed,
// which the transaction's locks rule out; the transaction is rolled back.
var errReadLost = errors.New("sqlstore: the read of a write-then-read statement found no row")

// query runs st and hands each row it returns to scan, and reports how many
// rows there were. Errors are classified. Pass tx to run inside a transaction.
func (s *Store) query(ctx context.Context, tx *sql.Tx, st returning, scan func(scanner) error) (int, error) {
	if st.wr.Write == "" {
		q := s.on(tx)
		rows, err := q.QueryContext(ctx, st.query, st.args...)
		n, err := scanRows(rows, err, scan)
		return n, s.classify(err)
	}
	var n int
	err := s.inTx(ctx, tx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, st.wr.Write, st.write...)
		if err != nil {
			return s.classify(err)
		}
		if changed, err := res.RowsAffected(); err != nil || changed == 0 {
			return s.classify(err)
		}
		rows, err := tx.QueryContext(ctx, st.wr.Read, st.read...)
		if n, err = scanRows(rows, err, scan); err == nil && n == 0 {
			err = errReadLost
		}
		return s.classify(err)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// scanRows hands each row to scan and returns how many there were.
func scanRows(rows *sql.Rows, err error, scan func(scanner) error) (int, error) {
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		if err := scan(rows); err != nil {
			return n, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	return n, rows.Close()
}
