package action

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sqlease/sqlease"
)

// Defaults and bounds of a daemon singleton's process (API.md "Singletons").
const (
	DefaultSingletonHeartbeat   = 30 * time.Second
	DefaultSingletonStopTimeout = 10 * time.Second
	maxSingletonDuration        = 24 * time.Hour
	maxSingletonStateBytes      = 64 << 10
)

// ProcessSpec is a daemon singleton: a command that the node holding the
// singleton runs and supervises.
type ProcessSpec struct {
	Name    string            `json:"name"`
	Command []string          `json:"command"`
	Env     map[string]string `json:"env,omitempty"`
	// InitialState is the state before the process first saves one (JSON).
	InitialState json.RawMessage `json:"initial_state,omitempty"`
	// Heartbeat is the dead man's switch interval. Default 30s.
	Heartbeat Duration `json:"heartbeat,omitempty"`
	// StopTimeout is how long the process gets between SIGTERM and
	// SIGKILL when the node loses the singleton. Default 10s.
	StopTimeout Duration `json:"stop_timeout,omitempty"`
}

// ParseProcessSpec decodes and validates a singleton definition and
// applies its defaults. Unknown fields are refused. Errors wrap
// sqlease.ErrInvalidConfig and name the field.
func ParseProcessSpec(raw []byte) (ProcessSpec, error) {
	var p ProcessSpec
	bad := func(format string, args ...any) (ProcessSpec, error) {
		return ProcessSpec{}, fmt.Errorf("%w: "+format, append([]any{sqlease.ErrInvalidConfig}, args...)...)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return bad("singleton: %v", err)
	}
	if dec.More() {
		return bad("singleton: trailing data after the object")
	}
	if err := sqlease.ValidateJobName(p.Name); err != nil {
		return bad("name: %v", err)
	}
	if len(p.Command) == 0 || p.Command[0] == "" {
		return bad("command: must name a program, e.g. [\"python3\", \"/srv/ingest.py\"]")
	}
	for i, a := range p.Command {
		if strings.IndexByte(a, 0) >= 0 || !utf8.ValidString(a) {
			return bad("command[%d]: contains a NUL byte or invalid UTF-8", i)
		}
	}
	for k, v := range p.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(k+v) {
			return bad("env: %q is not a valid variable", k)
		}
		if strings.HasPrefix(k, "SQLEASE_") {
			return bad("env: %q: SQLEASE_ variables are set by the node", k)
		}
	}
	if len(p.InitialState) > 0 {
		if !json.Valid(p.InitialState) {
			return bad("initial_state: not JSON")
		}
		if len(p.InitialState) > maxSingletonStateBytes {
			return bad("initial_state: %d bytes, at most %d", len(p.InitialState), maxSingletonStateBytes)
		}
	} else {
		p.InitialState = json.RawMessage("null")
	}
	for field, d := range map[string]*Duration{"heartbeat": &p.Heartbeat, "stop_timeout": &p.StopTimeout} {
		if *d < 0 || time.Duration(*d) > maxSingletonDuration {
			return bad("%s: must be in (0, %s], got %s", field, maxSingletonDuration, d)
		}
	}
	// A field given as zero would silently mean the default: say so. (The
	// keys, not the text: a singleton may be named "heartbeat".)
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(raw, &keys)
	if present(keys["heartbeat"]) && p.Heartbeat == 0 {
		return bad("heartbeat: must be positive (omit it for the default 30s)")
	}
	if present(keys["stop_timeout"]) && p.StopTimeout == 0 {
		return bad("stop_timeout: must be positive (omit it for the default 10s)")
	}
	if p.Heartbeat == 0 {
		p.Heartbeat = Duration(DefaultSingletonHeartbeat)
	}
	if p.StopTimeout == 0 {
		p.StopTimeout = Duration(DefaultSingletonStopTimeout)
	}
	return p, nil
}

// MaxStateBytes bounds a state a singleton process saves.
const MaxStateBytes = maxSingletonStateBytes

// RunProcess runs the singleton's command with the node's variables added
// to its environment (env: "KEY=value"), until it exits or ctx ends. When
// ctx ends it sends SIGTERM to the process group, then SIGKILL after
// StopTimeout, and returns once the process is gone. The process never
// outlives the node: it gets SIGKILL when the node's process dies (Linux).
// stdout and stderr go to the node's stderr.
//
// until, if not nil, tells the instant the run's right to act ends unless
// its lease is renewed (singleton.Instance.ActDeadline): with a guard set
// (SetExecGuard), the guard kills the process group then should the node
// be frozen, and when the node dies.
func RunProcess(ctx context.Context, p ProcessSpec, env []string, until func() (time.Time, bool)) error {
	cmd := exec.Command(p.Command[0], p.Command[1:]...)
	cmd.Env = processEnv(p, env)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	startSupervised(cmd)
	guard, err := prepareGuard(until)
	if err != nil {
		return fmt.Errorf("singleton %s: not started: its guard: %w", p.Name, err)
	}
	unlock := lockThread() // Pdeathsig follows the thread that started the child
	defer unlock()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("singleton %s: start %q: %w", p.Name, p.Command[0], err)
	}
	stopGuard, err := guard.start(cmd)
	if err != nil {
		signalGroup(cmd, true)
		_ = cmd.Wait()
		return fmt.Errorf("singleton %s: start its guard: %w", p.Name, err)
	}
	defer stopGuard()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return exitError(p, err)
	case <-ctx.Done():
	}
	signalGroup(cmd, false)
	t := time.NewTimer(time.Duration(p.StopTimeout))
	defer t.Stop()
	select {
	case err := <-done:
		return exitError(p, err)
	case <-t.C:
		signalGroup(cmd, true)
		return exitError(p, <-done)
	}
}

func exitError(p ProcessSpec, err error) error {
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("singleton %s: %s", p.Name, ee.ProcessState.String())
	}
	return fmt.Errorf("singleton %s: %w", p.Name, err)
}

// processEnv is the node's environment without its own SQLEASE_ settings
// (which may hold secrets), plus the spec's variables and the run's.
func processEnv(p ProcessSpec, run []string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SQLEASE_") {
			out = append(out, kv)
		}
	}
	for k, v := range p.Env {
		out = append(out, k+"="+v)
	}
	return append(out, run...)
}
