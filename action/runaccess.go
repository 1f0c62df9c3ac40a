package action

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	"github.com/sqlease/sqlease"
)

// RunAccess is how a running action calls back the node that runs it: the
// node's API base URL and the attempt's own secret, for
// PUT /v1/jobs/{name}/checkpoint. An HTTP action gets them as the
// Sqlease-Api and Sqlease-Run-Token headers, a command as SQLEASE_API and
// SQLEASE_RUN_TOKEN. The token is redacted from the run's output and error
// like every other secret of the action.
type RunAccess struct {
	API   string
	Token string
}

type runAccessKey struct{}

// WithRunAccess returns ctx carrying a, for the action Spec.Run (or
// Handle) runs in it.
func WithRunAccess(ctx context.Context, a RunAccess) context.Context {
	return context.WithValue(ctx, runAccessKey{}, a)
}

// runAccessOf returns the RunAccess ctx carries, if any.
func runAccessOf(ctx context.Context) RunAccess {
	a, _ := ctx.Value(runAccessKey{}).(RunAccess)
	return a
}

// runSecrets are the secrets of the run itself: its token.
func runSecrets(ctx context.Context) []string {
	if t := runAccessOf(ctx).Token; t != "" {
		return []string{t}
	}
	return nil
}

// MaxCheckpointHeaderBytes bounds the checkpoint an HTTP action receives in
// its Sqlease-Checkpoint header. Common servers refuse a request with a
// larger header (nginx and Apache at 8 KiB a line, Node.js at 16 KiB in
// all), so that every retry of the occurrence would fail the same way: a
// larger checkpoint is announced by Sqlease-Checkpoint-Size instead, and
// the action reads it with GET $SQLEASE_API/v1/jobs/{name}/checkpoint.
const MaxCheckpointHeaderBytes = 4096

// callbackValues are the values of API.md's table beyond the run's
// identity: the node's API and the attempt's token when ctx carries them,
// and the checkpoint an earlier attempt saved (none on a first attempt, or
// when none was saved), compacted to one line (a header value cannot hold
// a line break).
func callbackValues(ctx context.Context, run sqlease.Run) []runValue {
	var out []runValue
	if a := runAccessOf(ctx); a.API != "" && a.Token != "" {
		out = append(out, runValue{"Sqlease-Api", "SQLEASE_API", a.API}, runValue{"Sqlease-Run-Token", "SQLEASE_RUN_TOKEN", a.Token})
	}
	if len(run.Checkpoint) > 0 {
		var b bytes.Buffer
		if err := json.Compact(&b, run.Checkpoint); err == nil {
			// DEL may stand raw in a JSON string but not in a header
			// value: escaped, the JSON means the same.
			v := strings.ReplaceAll(b.String(), "\x7f", `\u007f`)
			out = append(out, runValue{"Sqlease-Checkpoint", "SQLEASE_CHECKPOINT", v})
		}
	}
	return out
}
