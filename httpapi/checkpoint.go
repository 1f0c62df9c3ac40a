package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/sqlease/sqlease/action"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// Checkpoints serves PUT and GET /v1/jobs/{name}/checkpoint: the runs of
// job actions this node executes, each with its own secret (the action's
// SQLEASE_RUN_TOKEN or Sqlease-Run-Token).
type Checkpoints interface {
	// Authenticate checks a running action's secret (in constant time)
	// before anything else of the call is looked at, its body included:
	// ErrUnauthorized unless secret is that of the attempt of job name
	// running on this node — one error, whether the job exists, runs
	// here or not.
	Authenticate(name, secret string) error
	// SaveCheckpoint saves v as the checkpoint of that attempt, which
	// runs under epoch. It returns an error wrapping sqlease.ErrConflict,
	// and saves nothing, when the attempt is no longer current (another
	// epoch, a lost lease or lock, a run that ended);
	// sqlease.ErrInvalidConfig for an invalid v; ErrUnauthorized when the
	// attempt ended since Authenticate.
	SaveCheckpoint(ctx context.Context, name string, epoch int64, secret string, v []byte) error
	// GivenCheckpoint returns the checkpoint the attempt was handed when
	// it started (nil when none): ErrUnauthorized as Authenticate.
	GivenCheckpoint(name, secret string) (json.RawMessage, error)
}

// routeCheckpoints registers the checkpoint route when the node runs job
// actions that may call it.
func (a *api) routeCheckpoints() {
	c := a.cfg.Checkpoints
	if c == nil {
		return
	}
	// The attempt's secret first (secretCall): every failure of a caller
	// without it is the same 401, so that nobody learns which jobs run
	// where. Only the holder of the secret learns that its attempt is no
	// longer current (409).
	a.handleFunc("PUT /v1/jobs/{name}/checkpoint", a.secretCall("attempt", c.Authenticate, a.fail, func(r *http.Request, epoch int64, secret string) error {
		body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, scheduler.MaxCheckpointBytes))
		if err != nil {
			return bodyError(err)
		}
		// Refused here with the field named (the store would say the
		// same, as a wrapped error).
		if err := sqlstore.CheckCheckpoint(body); err != nil {
			return badRequest("checkpoint: must be one JSON value in UTF-8 without NUL characters, of at most %d bytes", scheduler.MaxCheckpointBytes)
		}
		return c.SaveCheckpoint(r.Context(), r.PathValue("name"), epoch, secret, body)
	}))
	// The checkpoint the attempt was handed, for an HTTP action that got
	// only its size (action.MaxCheckpointHeaderBytes).
	a.handleFunc("GET /v1/jobs/{name}/checkpoint", func(w http.ResponseWriter, r *http.Request) {
		secret, ok := bearerCredential(r)
		if !ok {
			refuseRunSecret(w, r)
			return
		}
		v, err := c.GivenCheckpoint(r.PathValue("name"), secret)
		if err != nil {
			refuseRunSecret(w, r)
			return
		}
		if len(v) == 0 {
			writeProblem(w, http.StatusNotFound, "this attempt was handed no checkpoint (a first attempt, or no earlier attempt saved one)")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(v)
	})
}

// checkpointView is a run's checkpoint as the API and the dashboard show
// it: the JSON as saved, but for the node's secrets (its API token, its
// database password, its SQLEASE_SECRET_* values), redacted as in a run's
// output. A checkpoint is the action's own data, handed back verbatim to
// the next attempt; but an action that has the node's secrets (a header
// that references one) could save one in it, and the runs listing is read
// by more people than the action's author. Null when there is none; a
// redaction that breaks the JSON (a secret outside a string) shows the
// redacted text as a string.
func checkpointView(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return nil
	}
	red := action.RedactOutput(string(v))
	if red == string(v) || json.Valid([]byte(red)) {
		return json.RawMessage(red)
	}
	b, _ := json.Marshal(red)
	return b
}
