package sqlstore

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"time"
)

// on is tx when there is one, else the pool.
func (s *Store) on(tx *sql.Tx) Querier {
	if tx != nil {
		return tx
	}
	return s.db
}

// inTx runs fn in tx when given, else in a transaction of its own. One
// that the server rolled back as a deadlock's victim (or a serialization failure) is run again, up to txAttempts times
// in all: the error says nothing of it was written, and its caller — an
// API request — would otherwise see a 503 for a conflict it did not cause
// (MariaDB picks a trigger's write-then-read as the victim of a finish
// committing beside it). fn must be safe to run again: it starts from its
// arguments each time.
func (s *Store) inTx(ctx context.Context, tx *sql.Tx, fn func(*sql.Tx) error) error {
	if tx != nil {
		return fn(tx)
	}
	var err error
	for attempt := 1; ; attempt++ {
		err = s.ownTx(ctx, fn)
		if attempt == txAttempts || s.d.RolledBack == nil || !s.d.RolledBack(err) || ctx.Err() != nil {
			return err
		}
		// A short random pause, longer each time, so that the two sides
		// of a deadlock do not meet again in step.
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * time.Duration(1+rand.IntN(5)) * time.Millisecond):
		}
	}
}

// txAttempts bounds inTx's runs of one transaction.
const txAttempts = 4

// ownTx runs fn in a new transaction and commits it.
func (s *Store) ownTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, s.d.TxOptions)
	if err != nil {
		return s.classify(err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := fn(tx); err != nil {
		return err
	}
	return s.classify(tx.Commit())
}
