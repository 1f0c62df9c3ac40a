package scheduler

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// Run checkpoints: a handler saves its progress with Checkpoint while it
// runs; when the attempt does not finish (its node crashed, it lost its
// lease or lock, it failed and is retried), the next attempt of the same
// occurrence gets the last checkpoint saved as Run.Checkpoint and resumes
// from there. A checkpoint is written like the run's other writes: only
// while the attempt is current (its job lock held; in leader mode also in
// the lease-fenced transaction), so a deposed attempt cannot overwrite the
// progress of the one that replaced it.

// MaxCheckpointBytes bounds a checkpoint's JSON: 64 KiB, as a singleton's
// state. (It is handed to the next attempt of a daemon action in an
// environment variable or an HTTP header.)
const MaxCheckpointBytes = sqlstore.MaxCheckpointBytes

// checkpointTimeout bounds one checkpoint's write.
const checkpointTimeout = 10 * time.Second

// Checkpoint saves v as the checkpoint of the run executing in ctx,
// replacing the one it saved before: v is encoded with encoding/json,
// unless it is a json.RawMessage (used as it is). The next attempt of the
// same occurrence receives the last one saved as Run.Checkpoint.
//
// It returns an error wrapping sqlease.ErrLeaseLost, and saves nothing,
// when the attempt is no longer current: its lease or lock is lost or no
// longer trusted, or the run has ended (the handler should then stop); one
// wrapping sqlease.ErrInvalidConfig when v is not a JSON value of at most
// MaxCheckpointBytes in UTF-8, or when ctx is not a run's of a Scheduler;
// a database error otherwise (the checkpoint may then not be saved; saving
// again is safe).
func Checkpoint(ctx context.Context, v any) error {
	g, ok := ctx.Value(gateKey{}).(*runGate)
	if !ok || g.sched == nil {
		return fmt.Errorf("%w: scheduler.Checkpoint outside a run of a Scheduler", sqlease.ErrInvalidConfig)
	}
	raw, ok := v.(json.RawMessage)
	if !ok {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("%w: checkpoint: %w", sqlease.ErrInvalidConfig, err)
		}
		raw = b
	}
	if err := sqlstore.CheckCheckpoint(raw); err != nil {
		return err
	}
	return g.save(ctx, raw)
}

// save writes the checkpoint of g's run. (The run's write lives on its
// gate, which every run allocates anyway: no closure per run.)
func (g *runGate) save(ctx context.Context, v json.RawMessage) error {
	// The local check first: a run that may no longer act (its term or
	// lock trust over, its context cancelled) saves nothing, even where
	// the database would still take the write.
	if err := g.check(); err != nil {
		return notCurrent(err)
	}
	if err := ctx.Err(); err != nil {
		return notCurrent(context.Cause(ctx))
	}
	wctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	err := g.fenced(wctx, func(tx *sql.Tx) error { return g.sched.store.SaveCheckpoint(wctx, tx, g.lock, g.run, v) })
	if err != nil {
		if errors.Is(err, sqlease.ErrNotLeader) {
			return notCurrent(err)
		}
		if ctx.Err() != nil {
			// The run ended while the write was on its way (its lock or
			// term lost, found by its heartbeat): say so, not "context
			// canceled".
			return notCurrent(context.Cause(ctx))
		}
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// notCurrent is the error of a checkpoint refused because its attempt is
// no longer current: it wraps sqlease.ErrLeaseLost whatever the reason.
func notCurrent(err error) error {
	if errors.Is(err, sqlease.ErrLeaseLost) {
		return fmt.Errorf("checkpoint: the attempt is no longer current: %w", err)
	}
	return fmt.Errorf("checkpoint: the attempt is no longer current: %w: %w", sqlease.ErrLeaseLost, err)
}

// resumeFrom sets r.Checkpoint to the last checkpoint an earlier attempt
// of r's occurrence saved (a first attempt has none to read). A failed
// read fails the attempt: running it from the start would redo what the
// checkpoint says is done.
func (s *Scheduler) resumeFrom(ctx context.Context, r *sqlease.Run) error {
	if r.Attempt <= 1 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	return retryTransient(rctx, func() error {
		v, _, err := s.store.LatestCheckpoint(rctx, r.JobID, r.ScheduledFor, r.Attempt)
		if err != nil {
			return fmt.Errorf("read the checkpoint of an earlier attempt: %w", err)
		}
		r.Checkpoint = v
		return nil
	})
}
