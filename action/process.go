package action

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/strictjson"
)

// Defaults and bounds of a daemon singleton's process (API.md "Singletons").
const (
	DefaultSingletonHeartbeat   = 30 * time.Second
	DefaultSingletonStopTimeout = 10 * time.Second
	maxSingletonDuration        = 24 * time.Hour
	maxSingletonStateBytes      = 64 << 10
)

// Bounds of a singleton definition: ParseProcessSpec refuses more.
const (
	// MaxProcessSpecBytes bounds a definition's JSON.
	MaxProcessSpecBytes = 256 << 10
	// MaxProcessArgs bounds the command's program and arguments together.
	MaxProcessArgs = 256
	// MaxProcessArgBytes bounds each of them; MaxProcessCommandBytes all
	// of them.
	MaxProcessArgBytes     = 16 << 10
	MaxProcessCommandBytes = 64 << 10
	// MaxProcessEnv bounds the number of variables; MaxProcessEnvNameBytes
	// the length of a name, MaxProcessEnvValueBytes of a value and
	// MaxProcessEnvBytes of all names and values.
	MaxProcessEnv           = 256
	MaxProcessEnvNameBytes  = 256
	MaxProcessEnvValueBytes = 16 << 10
	MaxProcessEnvBytes      = 64 << 10
)

// ProcessSpec is a daemon singleton: a command that the node holding the
// singleton runs and supervises.
type ProcessSpec struct {
	Name    string   `json:"name"`
	Command []string `json:"command"`
	// Env adds variables to the process's environment: literal values, or
	// references to secrets the node reads when it starts the process.
	Env map[string]EnvValue `json:"env,omitempty"`
	// InitialState is the state before the process first saves one (JSON).
	InitialState json.RawMessage `json:"initial_state,omitempty"`
	// Heartbeat is the dead man's switch interval. Default 30s.
	Heartbeat Duration `json:"heartbeat,omitempty"`
	// StopTimeout is how long the process gets between SIGTERM and
	// SIGKILL when the node loses the singleton. Default 10s.
	StopTimeout Duration `json:"stop_timeout,omitempty"`
}

// EnvValue is the value of a singleton's variable: a literal string (in
// JSON a string), or a reference to a secret (in JSON {"env":
// "SQLEASE_SECRET_…"} or {"file": "rel/path"}, as for an HTTP action's
// headers; see SecretRef) that the node reads each time it starts the
// process, so that the secret is neither stored nor shown.
type EnvValue struct {
	Value string
	Ref   *SecretRef
}

// String is the value, or the reference as its JSON ({"env": "NAME"}), as
// views show it.
func (v EnvValue) String() string {
	if v.Ref != nil {
		b, _ := json.Marshal(v.Ref)
		return string(b)
	}
	return v.Value
}

// MarshalJSON writes the value as a string, or the reference as an object.
func (v EnvValue) MarshalJSON() ([]byte, error) {
	if v.Ref != nil {
		return json.Marshal(v.Ref)
	}
	return json.Marshal(v.Value)
}

// UnmarshalJSON reads a string or a reference; anything else is an error.
func (v *EnvValue) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*v = EnvValue{Value: s}
		return nil
	}
	var ref SecretRef
	if err := decodeStrict("env", b, &ref); err != nil {
		return errors.New(`must be a string or {"env": "SQLEASE_SECRET_…"} or {"file": "rel/path"}`)
	}
	if err := ref.validate(); err != nil {
		return err
	}
	*v = EnvValue{Ref: &ref}
	return nil
}

// ParseProcessSpec decodes and validates a singleton definition and
// applies its defaults. Unknown fields are refused, and so are member
// names spelled in another case than the field's, members given twice,
// invalid UTF-8 and NUL characters anywhere, and definitions beyond the
// bounds above (MaxProcessSpecBytes, MaxProcessArgs, …). Errors wrap
// sqlease.ErrInvalidConfig and name the field ("command[2]",
// "env.DB_PASSWORD", …).
func ParseProcessSpec(raw []byte) (ProcessSpec, error) {
	bad := func(format string, args ...any) (ProcessSpec, error) {
		return ProcessSpec{}, fmt.Errorf("%w: "+format, append([]any{sqlease.ErrInvalidConfig}, args...)...)
	}
	if len(raw) > MaxProcessSpecBytes {
		return bad("singleton: %d bytes, at most %d", len(raw), MaxProcessSpecBytes)
	}
	var wire struct {
		Name         string                     `json:"name"`
		Command      []string                   `json:"command"`
		Env          map[string]json.RawMessage `json:"env"`
		InitialState json.RawMessage            `json:"initial_state"`
		Heartbeat    json.RawMessage            `json:"heartbeat"`
		StopTimeout  json.RawMessage            `json:"stop_timeout"`
	}
	// Checked against the spec's own type: what is stored is its JSON.
	if err := strictjson.Check(raw, &ProcessSpec{}, strictjson.Options{NoNUL: true}); err != nil {
		return bad("%v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&wire); err != nil {
		return bad("singleton: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("singleton: trailing data after the object")
	}
	p := ProcessSpec{Name: wire.Name, Command: wire.Command, InitialState: wire.InitialState}
	if err := sqlease.ValidateJobName(p.Name); err != nil {
		return bad("name: %v", err)
	}
	if len(p.Command) == 0 || p.Command[0] == "" {
		return bad("command: must name a program, e.g. [\"python3\", \"/srv/ingest.py\"]")
	}
	if len(p.Command) > MaxProcessArgs {
		return bad("command: %d arguments, at most %d", len(p.Command), MaxProcessArgs)
	}
	total := 0
	for i, a := range p.Command {
		switch {
		case strings.IndexByte(a, 0) >= 0 || !utf8.ValidString(a):
			return bad("command[%d]: contains a NUL byte or invalid UTF-8", i)
		case len(a) > MaxProcessArgBytes:
			return bad("command[%d]: %d bytes, at most %d", i, len(a), MaxProcessArgBytes)
		}
		total += len(a)
	}
	if total > MaxProcessCommandBytes {
		return bad("command: %d bytes in all, at most %d", total, MaxProcessCommandBytes)
	}
	if len(wire.Env) > MaxProcessEnv {
		return bad("env: %d variables, at most %d", len(wire.Env), MaxProcessEnv)
	}
	total = 0
	for k, rv := range wire.Env {
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00") || !utf8.ValidString(k):
			return bad("env: %q is not a valid variable name", k)
		case len(k) > MaxProcessEnvNameBytes:
			return bad("env: a variable name of %d bytes, at most %d", len(k), MaxProcessEnvNameBytes)
		case strings.HasPrefix(k, "SQLEASE_"):
			return bad("env.%s: SQLEASE_ variables are set by the node", k)
		}
		var v EnvValue
		if err := v.UnmarshalJSON(rv); err != nil {
			return bad("env.%s: %v", k, err)
		}
		switch {
		case strings.IndexByte(v.Value, 0) >= 0 || !utf8.ValidString(v.Value):
			return bad("env.%s: contains a NUL byte or invalid UTF-8", k)
		case len(v.Value) > MaxProcessEnvValueBytes:
			return bad("env.%s: %d bytes, at most %d", k, len(v.Value), MaxProcessEnvValueBytes)
		}
		total += len(k) + len(v.Value)
		if p.Env == nil {
			p.Env = map[string]EnvValue{}
		}
		p.Env[k] = v
	}
	if total > MaxProcessEnvBytes {
		return bad("env: %d bytes in all, at most %d", total, MaxProcessEnvBytes)
	}
	if present(p.InitialState) {
		if !json.Valid(p.InitialState) {
			return bad("initial_state: not JSON")
		}
		if len(p.InitialState) > maxSingletonStateBytes {
			return bad("initial_state: %d bytes, at most %d", len(p.InitialState), maxSingletonStateBytes)
		}
	} else {
		p.InitialState = json.RawMessage("null")
	}
	for _, d := range []struct {
		field string
		raw   json.RawMessage
		to    *Duration
		def   time.Duration
	}{{"heartbeat", wire.Heartbeat, &p.Heartbeat, DefaultSingletonHeartbeat}, {"stop_timeout", wire.StopTimeout, &p.StopTimeout, DefaultSingletonStopTimeout}} {
		if !present(d.raw) {
			*d.to = Duration(d.def)
			continue
		}
		if err := d.to.UnmarshalJSON(bytes.TrimSpace(d.raw)); err != nil {
			return bad("%s: %v", d.field, err)
		}
		if *d.to <= 0 || time.Duration(*d.to) > maxSingletonDuration {
			return bad("%s: must be in (0, %s], got %s (omit it for the default %s)", d.field, maxSingletonDuration, d.to, d.def)
		}
	}
	return p, nil
}

// RedactProcess returns p as reads may show it (the API, the dashboard,
// the CLI): the values of variables whose names look secret (SecretName:
// DB_PASSWORD, API_TOKEN, …) replaced by ***, references shown as the
// reference (they hold no secret), and the passwords of URLs in the
// variables and the command replaced by *** — as is the value of an
// argument --NAME=VALUE whose NAME looks secret. p is not changed.
func RedactProcess(p ProcessSpec) ProcessSpec {
	out := p
	out.Command = RedactArgs(p.Command)
	if p.Env != nil {
		out.Env = make(map[string]EnvValue, len(p.Env))
		for k, v := range p.Env {
			switch {
			case v.Ref != nil:
				ref := *v.Ref
				v.Ref = &ref
			case SecretName(k):
				v.Value = Redacted
			default:
				v.Value = redactURL(v.Value)
			}
			out.Env[k] = v
		}
	}
	return out
}

// MaxStateBytes bounds a state a singleton process saves.
const MaxStateBytes = maxSingletonStateBytes

// MaxLogLine bounds a line of a singleton process's output in the node's
// log: a longer line is cut there, marked "…".
const MaxLogLine = 2048

// ProcessOptions are what RunProcess needs beyond the definition.
type ProcessOptions struct {
	// Env are the run's variables ("KEY=value": SQLEASE_SINGLETON, …),
	// added after the definition's.
	Env []string
	// Until, if not nil, tells the instant the run's right to act ends
	// unless its lease is renewed (singleton.Instance.ActDeadline): with a
	// guard set (SetExecGuard), the guard kills the process group then
	// should the node be frozen, and when the node dies.
	Until func() (time.Time, bool)
	// Logger receives each line the process writes, standard output and
	// error alike, redacted, at Info as "singleton_output" with the
	// attributes singleton and line (a quoted value: a line cannot pose as
	// a log record of its own). Nil discards them.
	Logger *slog.Logger
}

// ProcessError is the error of RunProcess when the process failed: it
// exited with a non-zero status or was killed. LastOutput is the last
// non-empty line it wrote, redacted (as in the log), at most
// MaxErrorOutput bytes; "" when it wrote none.
type ProcessError struct {
	Singleton  string
	Cause      string // "exit status N", "killed by signal SIGNAME"
	LastOutput string
	Err        error // the *exec.ExitError
}

// Error returns "singleton NAME: CAUSE" and ": LAST LINE" when there is one.
func (e *ProcessError) Error() string {
	msg := "singleton " + e.Singleton + ": " + e.Cause
	if e.LastOutput != "" {
		msg += ": " + e.LastOutput
	}
	return msg
}

// Unwrap returns the *exec.ExitError.
func (e *ProcessError) Unwrap() error { return e.Err }

// RunProcess runs the singleton's command until it exits or ctx ends. Its
// environment is the node's without the node's SQLEASE_* settings, plus
// the definition's variables (references resolved now: a missing secret
// fails the start) and opts.Env. When ctx ends it sends SIGTERM to the
// process group, then SIGKILL after StopTimeout, and returns once the
// process is gone; what the process left in its group is killed when it
// ends. The process never outlives the node: it gets SIGKILL when the
// node's process dies (Linux).
//
// Its standard output and error go line by line to opts.Logger, with
// every secret redacted (RedactOutput's node secrets, the definition's
// resolved references, and the values of its and opts.Env's variables
// whose names look secret, such as SQLEASE_SINGLETON_TOKEN), lines longer
// than MaxLogLine cut, invalid UTF-8 replaced. A failed process's error
// is a *ProcessError carrying the last line.
func RunProcess(ctx context.Context, p ProcessSpec, opts ProcessOptions) error {
	env, secrets, err := processEnv(p, opts.Env)
	if err != nil {
		return fmt.Errorf("singleton %s: not started: %w", p.Name, err)
	}
	cmd := exec.Command(p.Command[0], p.Command[1:]...)
	cmd.Env = env
	startSupervised(cmd)
	guard, err := prepareGuard(opts.Until)
	if err != nil {
		return fmt.Errorf("singleton %s: not started: its guard: %w", p.Name, err)
	}
	// One pipe for both streams, read line by line: the process's writes
	// never reach the node's own output unredacted.
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("singleton %s: not started: %w", p.Name, err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	unlock := lockThread() // Pdeathsig follows the thread that started the child
	defer unlock()
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return fmt.Errorf("singleton %s: start %q: %w", p.Name, p.Command[0], err)
	}
	stopGuard, err := guard.start(cmd)
	if err != nil {
		signalGroup(cmd, true)
		_ = cmd.Wait()
		r.Close()
		return fmt.Errorf("singleton %s: start its guard: %w", p.Name, err)
	}
	defer stopGuard()
	lines := newLineLog(p.Name, opts.Logger, secretList(secrets...))
	drained := drain(r, lines)
	finish := func(err error) error {
		signalGroup(cmd, true) // what it left in its group goes with it
		drained()
		lines.close()
		return exitError(p, err, lines.lastLine())
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return finish(err)
	case <-ctx.Done():
	}
	signalGroup(cmd, false)
	t := time.NewTimer(time.Duration(p.StopTimeout))
	defer t.Stop()
	select {
	case err := <-done:
		return finish(err)
	case <-t.C:
		signalGroup(cmd, true)
		return finish(<-done)
	}
}

func exitError(p ProcessSpec, err error, last string) error {
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &ProcessError{Singleton: p.Name, Cause: exitCause(ee), LastOutput: last, Err: ee}
	}
	return fmt.Errorf("singleton %s: %w", p.Name, err)
}

// processEnv is the node's environment without its own SQLEASE_ settings
// (which may hold secrets), plus the spec's variables (references
// resolved) and the run's; and the values among them to redact from the
// process's output.
func processEnv(p ProcessSpec, run []string) (env, secrets []string, err error) {
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SQLEASE_") {
			env = append(env, kv)
		}
	}
	secrets = append(nodeSecrets(), ArgSecrets(p.Command)...)
	for k, v := range p.Env {
		value := v.Value
		if v.Ref != nil {
			if value, err = v.Ref.resolve(); err != nil {
				return nil, nil, fmt.Errorf("env %s: %w", k, err)
			}
			if strings.IndexByte(value, 0) >= 0 {
				return nil, nil, fmt.Errorf("env %s: the secret contains NUL", k)
			}
			secrets = append(secrets, value)
		} else if SecretName(k) {
			secrets = append(secrets, value)
		}
		env = append(env, k+"="+value)
	}
	for _, kv := range run {
		if k, v, ok := strings.Cut(kv, "="); ok && SecretName(k) {
			secrets = append(secrets, v)
		}
	}
	return append(env, run...), secrets, nil
}

// lineLog writes a process's output to a logger line by line, redacted
// and bounded, and keeps the last non-empty line.
type lineLog struct {
	name    string
	log     *slog.Logger
	secrets []string
	max     int // bytes of a line kept to redact it: MaxLogLine + longest secret
	buf     []byte
	cut     bool // the rest of the current line is dropped
	last    string
}

func newLineLog(name string, log *slog.Logger, secrets []string) *lineLog {
	l := &lineLog{name: name, log: log, secrets: secrets, max: MaxLogLine}
	if len(secrets) > 0 {
		l.max += len(secrets[0])
	}
	return l
}

// Write takes any piece of the output.
func (l *lineLog) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if !l.cut {
			if room := l.max - len(l.buf); len(chunk) > room {
				l.buf = append(l.buf, chunk[:room]...)
				l.emit()
				l.cut = true
			} else {
				l.buf = append(l.buf, chunk...)
			}
		}
		if i < 0 {
			break
		}
		if !l.cut {
			l.emit()
		}
		l.cut = false
		p = p[i+1:]
	}
	return n, nil
}

// close logs a last line that did not end with a newline.
func (l *lineLog) close() {
	if len(l.buf) > 0 && !l.cut {
		l.emit()
	}
}

// emit logs the buffered line: redacted over its whole buffer (so that a
// secret across MaxLogLine is replaced whole), then cut.
func (l *lineLog) emit() {
	b := bytes.TrimRight(l.buf, "\r")
	line := redactHead(b, MaxLogLine, l.secrets)
	if len(b) > MaxLogLine {
		line += "…"
	}
	l.buf = l.buf[:0]
	if strings.TrimSpace(line) != "" {
		l.last = line
	}
	if l.log != nil {
		l.log.Info("singleton_output", slog.String("singleton", l.name), slog.String("line", line))
	}
}

// lastLine is the last non-empty line, at most MaxErrorOutput bytes of its
// end.
func (l *lineLog) lastLine() string {
	line := strings.TrimSpace(l.last)
	if len(line) > MaxErrorOutput {
		line = line[len(line)-MaxErrorOutput:]
		for line != "" && !utf8.RuneStart(line[0]) {
			line = line[1:]
		}
		line = "…" + line
	}
	return line
}
