package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/action"
	"github.com/sqlease/sqlease/scheduler"
)

// runHost hands each attempt of a job action this node runs a secret of
// its own and the node's API (action.RunAccess: SQLEASE_RUN_TOKEN and
// SQLEASE_API, or the Sqlease-Run-Token and Sqlease-Api headers), and
// serves the attempt's checkpoint calls (httpapi.Checkpoints): a call with
// the secret of an attempt running here saves through that run's
// scheduler.Checkpoint, fenced like the run's other writes.
//
// The secrets are runSecrets': the secret itself lives in the action's
// environment or request only, is never logged nor stored, and is redacted
// from the run's output.
type runHost struct {
	api  string              // this node's base URL
	runs runSecrets[*jobRun] // the attempts running here, by their secret
}

// jobRun is an attempt running here.
type jobRun struct {
	epoch int64
	ctx   context.Context
	given json.RawMessage // the checkpoint the attempt was handed, if any
}

func newRunHost() *runHost { return &runHost{} }

// Handler wraps next (the action's handler) so that each attempt gets its
// secret and is known here while it runs.
func (h *runHost) Handler(next scheduler.Handler) scheduler.Handler {
	return func(ctx context.Context, run sqlease.Run) error {
		token, release := h.runs.issue(run.Job, &jobRun{epoch: run.Epoch, ctx: ctx, given: run.Checkpoint})
		defer release()
		return next(action.WithRunAccess(ctx, action.RunAccess{API: h.api, Token: token}), run)
	}
}

// Authenticate checks an action's secret against the attempt of job name
// running here, in constant time whether or not one is (a missing one is
// compared with a secret nobody holds): httpapi.ErrUnauthorized for every
// caller without the attempt's secret.
func (h *runHost) Authenticate(name, secret string) error {
	_, err := h.find(name, secret)
	return err
}

func (h *runHost) find(name, secret string) (*jobRun, error) { return h.runs.find(name, secret) }

// GivenCheckpoint returns the checkpoint the attempt of job name that
// holds secret was handed when it started (nil when none), for an HTTP
// action whose checkpoint was too large for a header.
func (h *runHost) GivenCheckpoint(name, secret string) (json.RawMessage, error) {
	r, err := h.find(name, secret)
	if err != nil {
		return nil, err
	}
	return r.given, nil
}

// SaveCheckpoint saves v for the attempt of job name that holds secret:
// ErrConflict when it runs under another epoch than the caller says, or
// is no longer current (scheduler.Checkpoint's ErrLeaseLost: a lost lease
// or lock, a run that ended).
func (h *runHost) SaveCheckpoint(ctx context.Context, name string, epoch int64, secret string, v []byte) error {
	r, err := h.find(name, secret)
	if err != nil {
		return err
	}
	if r.epoch != epoch {
		return fmt.Errorf("%w: job %q: this attempt runs under epoch %d, not %d", sqlease.ErrConflict, name, r.epoch, epoch)
	}
	// The run's context: the write is the run's, fenced by its gate and
	// cancelled with it; the request's context bounds it too.
	wctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	err = scheduler.Checkpoint(wctx, json.RawMessage(v))
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil: // the caller went away
		return fmt.Errorf("checkpoint of job %q: %w", name, ctx.Err())
	case errors.Is(err, sqlease.ErrLeaseLost):
		return fmt.Errorf("%w: job %q: the attempt under epoch %d is no longer current: %w", sqlease.ErrConflict, name, epoch, err)
	}
	return err
}
