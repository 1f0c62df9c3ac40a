package sqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/sqlease/sqlease"
)

// CheckpointQueries is the SQL text of the run checkpoint table,
// {prefix}_run_checkpoints: the last checkpoint (a JSON value) each attempt
// saved while it ran, keyed like the run (job_id, scheduled_for, attempt).
// The next attempt of the same occurrence reads the latest of them
// (Latest) and resumes from there.
//
// Why a table of its own, keyed by attempt, rather than a column of the
// runs or the jobs row: older schemas gain it by CREATE TABLE alone (as the
// output table); a handler that checkpoints often rewrites only this small
// row, not the ledger's row (which a finish updates in place, on PostgreSQL
// as a HOT update) nor the job's (whose writes feed the leader's change
// cursor); and keyed by attempt, each attempt's last checkpoint stays
// readable in the run ledger while a later attempt saves its own. Its
// CREATE statements are in JobQueries.Migrations. A dialect without it (all
// fields empty) keeps no checkpoints: SaveCheckpoint refuses.
type CheckpointQueries struct {
	// Save: (job_id, scheduled_for, attempt, checkpoint). Inserts or
	// replaces the attempt's checkpoint, saved_at = now. Unfenced by
	// itself: SaveCheckpoint runs it in a transaction after the job lock's
	// own conditional write (see there).
	Save string
	// Latest: (job_id, scheduled_for, attempt). (attempt, checkpoint) of
	// the highest attempt below attempt of that occurrence that saved one;
	// no row when none did.
	Latest string
	// Between: (job_id, oldest scheduled_for, newest scheduled_for).
	// (scheduled_for, attempt, checkpoint) of the job's checkpoints in that
	// range, ends included.
	Between string
	// DeleteJob: (job_id). Deletes the job's checkpoints, in DeleteJob's
	// transaction.
	DeleteJob string
	// Prune: (older_than_ms). Deletes checkpoints saved longer ago than
	// that, as PruneRuns does with runs.
	Prune string
}

// MaxCheckpointBytes bounds a checkpoint: 64 KiB, as a singleton's state
// (action.MaxStateBytes). A checkpoint is handed to the next attempt in an
// environment variable or an HTTP header, and one page of runs carries one
// per attempt.
const MaxCheckpointBytes = 64 << 10

// CheckCheckpoint returns an error wrapping sqlease.ErrInvalidConfig unless
// v is one JSON value in UTF-8 of at most MaxCheckpointBytes, without NUL
// (a string may hold one escaped, as \u0000, which every dialect stores).
func CheckCheckpoint(v []byte) error {
	switch {
	case len(bytes.TrimSpace(v)) == 0:
		return fmt.Errorf("%w: checkpoint: must be a JSON value, got nothing", sqlease.ErrInvalidConfig)
	case len(v) > MaxCheckpointBytes:
		return fmt.Errorf("%w: checkpoint: %d bytes, at most %d", sqlease.ErrInvalidConfig, len(v), MaxCheckpointBytes)
	case !utf8.Valid(v) || bytes.IndexByte(v, 0) >= 0:
		// json.Valid lets invalid UTF-8 inside strings through, and
		// PostgreSQL refuses it (SQLSTATE 22021) as a server error.
		return fmt.Errorf("%w: checkpoint: must be UTF-8 without NUL characters", sqlease.ErrInvalidConfig)
	case !json.Valid(v):
		return fmt.Errorf("%w: checkpoint: must be a JSON value", sqlease.ErrInvalidConfig)
	}
	return nil
}

// ErrNoCheckpoints is returned by SaveCheckpoint on a dialect that keeps
// none (CheckpointQueries empty).
var ErrNoCheckpoints = errors.New("sqlstore: this dialect keeps no run checkpoints")

func (s *Store) cq() *CheckpointQueries { return &s.d.Jobs.Checkpoints }

// SaveCheckpoint saves v as the checkpoint of run, the attempt that holds
// lock l, replacing the one it saved before. It is fenced like the run's
// other writes: in one transaction (tx when given: the leader's
// lease-fenced one), the job lock's conditional write (JobQueries.Heartbeat:
// id, holder, lock_epoch) comes first and the checkpoint second. When the
// lock is no longer held — the job was reclaimed, the run finished — that
// write affects no row and SaveCheckpoint returns an error wrapping
// sqlease.ErrLeaseLost, writing nothing. The lock write also holds the job
// row until the commit, so a reclaim cannot slip in between the check and
// the write (a condition read by a subquery could read an older version of
// the row on PostgreSQL and MariaDB); and it extends locked_at, as a
// heartbeat does: the run has just shown it is alive. An invalid v wraps
// sqlease.ErrInvalidConfig (CheckCheckpoint).
func (s *Store) SaveCheckpoint(ctx context.Context, tx *sql.Tx, l Lock, run sqlease.Run, v json.RawMessage) error {
	if err := CheckCheckpoint(v); err != nil {
		return err
	}
	if s.cq().Save == "" {
		return ErrNoCheckpoints
	}
	err := s.inTx(ctx, tx, func(tx *sql.Tx) error {
		if err := s.fenceWrite(ctx, tx, l); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.cq().Save, l.JobID, s.timeArg(run.ScheduledFor), run.Attempt, string(v)); err != nil {
			return s.classify(err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save checkpoint of run %s attempt %d: %w", run.IdempotencyKey(), run.Attempt, err)
	}
	return nil
}

// LatestCheckpoint returns the last checkpoint an attempt before attempt
// of the occurrence (jobID, scheduledFor) saved, and that attempt's
// number; nil and 0 when none did.
func (s *Store) LatestCheckpoint(ctx context.Context, jobID int64, scheduledFor time.Time, attempt int) (json.RawMessage, int, error) {
	if s.cq().Latest == "" || attempt <= 1 {
		return nil, 0, nil
	}
	var from int
	var v string
	err := s.db.QueryRowContext(ctx, s.cq().Latest, jobID, s.timeArg(scheduledFor), attempt).Scan(&from, &v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read checkpoint of job %d at %s: %w", jobID, scheduledFor.UTC().Format(time.RFC3339Nano), s.classify(err))
	}
	return json.RawMessage(v), from, nil
}

// addCheckpoints fills in the Checkpoint of runs (a page of Runs: all of
// one job) from the checkpoint table: one query for the page, over its
// range of occurrences, as addOutputs does.
func (s *Store) addCheckpoints(ctx context.Context, runs []sqlease.Run) error {
	err := s.fillRuns(ctx, runs, s.cq().Between, func(r *sqlease.Run, v string) { r.Checkpoint = json.RawMessage(v) })
	if err != nil {
		return fmt.Errorf("read run checkpoints: %w", err)
	}
	return nil
}

// pruneCheckpoints deletes the checkpoints saved longer ago than retention.
// A checkpoint serves the retries of its occurrence, which come within the
// job's backoff, far inside any retention that keeps runs to look at.
func (s *Store) pruneCheckpoints(ctx context.Context, retention time.Duration) error {
	_, err := s.pruneOlder(ctx, s.cq().Prune, "run checkpoints", retention)
	return err
}
