package action

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
)

// ErrExecRefused is wrapped by every refusal of ExecPolicy: creating an exec
// action or a singleton (its command is an exec), and running one, on a node
// whose policy does not allow commands. The HTTP API answers it 403.
var ErrExecRefused = errors.New("sqlease: exec refused")

// ExecPolicy is a node's one decision on running commands: exec actions of
// jobs (single, batch, CLI) and singleton processes alike. Every surface
// that creates something that would run a command asks Check (or
// CheckAction) before it writes, and the node asks again at run time
// (Handler, and before starting a singleton's process), so a row written
// straight into the database by another node or the CLI does not run on a
// node that refuses commands.
//
// The zero value refuses everything.
type ExecPolicy struct {
	allowed bool
	reason  string // why not, naming the setting to change
}

// NewExecPolicy decides from a node's settings: allow is --allow-exec ("",
// "true" or "false"; "" means only on loopback), loopback says whether the
// API listens on loopback only, and token whether an API token is set.
// Commands are allowed when allow says so (or, unset, on loopback), and
// beyond loopback only with a token: anyone who reaches an unauthenticated
// node could otherwise run commands as its user.
func NewExecPolicy(allow string, loopback, token bool) ExecPolicy {
	switch {
	case allow == "false":
		return ExecPolicy{reason: "exec actions and singletons are disabled on this node (--allow-exec=false)"}
	case allow == "" && !loopback:
		return ExecPolicy{reason: "exec actions and singletons are disabled on this node: it listens beyond loopback " +
			"(they run commands as the daemon's user); start it with --allow-exec=true and --api-token to allow them"}
	case !loopback && !token:
		return ExecPolicy{reason: "this node listens beyond loopback without --api-token: anyone who reaches it could " +
			"run commands; set a token to allow exec actions and singletons"}
	}
	return ExecPolicy{allowed: true}
}

// AllowExec is the policy of a node that runs commands (tests, the library).
func AllowExec() ExecPolicy { return ExecPolicy{allowed: true} }

// Allowed reports whether the policy allows commands.
func (p ExecPolicy) Allowed() bool { return p.allowed }

// Check returns nil when commands are allowed, else an error wrapping
// ErrExecRefused that names field and says why.
func (p ExecPolicy) Check(field string) error {
	if p.allowed {
		return nil
	}
	reason := p.reason
	if reason == "" {
		reason = "exec actions and singletons are disabled on this node (start it with --allow-exec=true to allow them)"
	}
	return fmt.Errorf("%w: %s: %s", ErrExecRefused, field, reason)
}

// CheckAction is Check for a job's action JSON: nil for an action that runs
// no command. The action is read as Parse reads it, so what is checked is
// what would run.
func (p ExecPolicy) CheckAction(raw json.RawMessage) error {
	if p.allowed || !runsCommand(raw) {
		return nil
	}
	return p.Check("action.exec")
}

// runsCommand reports whether an action would run a command: it parses as
// an exec action, or (unparsable) looks like one.
func runsCommand(raw json.RawMessage) bool {
	if s, err := parseCached(raw); err == nil {
		return s.Exec != nil
	}
	return IsExec(raw)
}

// Handler wraps a scheduler handler: a run whose action would run a command
// fails at once, naming the policy, when the policy refuses commands. Other
// runs go to next.
func (p ExecPolicy) Handler(next scheduler.Handler) scheduler.Handler {
	if p.allowed {
		return next
	}
	return func(ctx context.Context, run sqlease.Run) error {
		if runsCommand(run.Action) {
			return fmt.Errorf("exec action not run: %w", p.Check("action.exec"))
		}
		return next(ctx, run)
	}
}
