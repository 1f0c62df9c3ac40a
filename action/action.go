// Package action implements the daemon's job actions: an HTTP request or a
// command, each bounded by a timeout, as described in API.md.
//
// A job's action is stored as JSON, {"http": {…}} or {"exec": {…}}. Parse
// decodes and validates it; Spec.Run executes one attempt of one occurrence,
// handing the action the run's identity: the Idempotency-Key and Sqlease-*
// headers of an HTTP request, or the SQLEASE_* environment of a command.
// Handle plugs both into a scheduler.
//
// # Redaction: which function each surface calls
//
// Secrets reach an action (credential headers, URL passwords, references
// to SQLEASE_SECRET_* variables and secret files), a singleton definition
// (its variables) and the node itself (its API token, its database
// password, registered once with AddNodeSecrets). One function per shape
// decides what may be shown; every surface calls it and nothing else:
//
//   - an action's JSON (job views of the API, the dashboard, the CLI):
//     Redact. It redacts what Parse reads, and Parse refuses the JSON that
//     encoding/json would read otherwise than a map lookup (member names in
//     another case, members given twice), so the action shown is the one
//     that runs.
//   - a singleton definition (its views): RedactProcess.
//   - text an action or a process produced (a run's output and error, a
//     singleton's log lines and last_error): RedactOutput; Spec.Run and
//     RunProcess apply it themselves, with the secrets of the action or
//     process in every form an echo may take (escaped, encoded, the Basic
//     header net/http derives from a URL's password).
//
// SecretHeader and SecretName are the one rule for which header and
// variable names hold secrets.
//
// # Where HTTP actions may connect
//
// A node reachable beyond loopback refuses HTTP actions to its own
// loopback and link-local addresses (the cloud's metadata service), checked
// on every address it dials: see DestinationPolicy.
package action

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/strictjson"
)

// Defaults and bounds.
const (
	// DefaultTimeout bounds an action that sets no timeout.
	DefaultTimeout = 30 * time.Second
	// MaxTimeout is the largest timeout Parse accepts.
	MaxTimeout = 24 * time.Hour
	// DefaultMethod is the HTTP method of an action that sets none.
	DefaultMethod = "POST"
	// MaxErrorOutput is how much of a failed action's output its one-line
	// error carries: the first line of an HTTP response body, the last
	// line a command wrote. The run's output (scheduler.SetOutput) keeps
	// more.
	MaxErrorOutput = 512
)

// ErrTimeout is wrapped by the error of Spec.Run when the action's own
// timeout expired (the caller records the outcome timed_out). It is
// sqlease.ErrTimedOut, so either sentinel matches. A cancellation of the
// caller's context is not a timeout: that error wraps the context's error.
var ErrTimeout = sqlease.ErrTimedOut

// errTimeoutCause is the cancellation cause of an action's own timeout.
var errTimeoutCause = errors.New("action timeout")

// Spec is a job's action: exactly one of HTTP and Exec.
type Spec struct {
	HTTP *HTTP `json:"http,omitempty"`
	Exec *Exec `json:"exec,omitempty"`
}

// HTTP is an action that sends one request; a 2xx response is success.
// Redirects are not followed: a 3xx response is a failure.
type HTTP struct {
	// URL is an absolute http or https URL.
	URL string `json:"url"`
	// Method is GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS. Default
	// DefaultMethod.
	Method string `json:"method,omitempty"`
	// Headers are sent with the request. Idempotency-Key and Sqlease-*
	// headers given here are ignored: those carry the run's identity and
	// always have the run's values. Host sets the request's host; a
	// Content-Type is sent only if given here; User-Agent defaults to
	// "sqlease".
	Headers map[string]string `json:"headers,omitempty"`
	// SecretHeaders are headers whose value the node reads when it sends
	// the request — from its environment or a file — so that the secret
	// is never stored in the database nor shown by the API. In JSON they
	// are headers whose value is {"env": "NAME"} or {"file": "/path"}.
	SecretHeaders map[string]SecretRef `json:"-"`
	// Body is the request body.
	Body string `json:"body,omitempty"`
	// Timeout bounds the whole request, from connecting to reading the
	// response. Default DefaultTimeout.
	Timeout Duration `json:"timeout,omitempty"`
}

// Exec is an action that runs a command, without a shell; exit status 0 is
// success. The command inherits the daemon's environment, less its SQLEASE_*
// variables (its own configuration, which may hold secrets), plus the run's
// SQLEASE_* values. Its standard input is /dev/null; its standard output and
// error are one stream, whose tail is kept as the run's output (see
// Spec.Run) and whose last line ends the error of a failed run.
//
// The command runs in a process group of its own. When it exits, times out
// or is cancelled, the whole group is killed (SIGKILL), so nothing it started
// outlives its run.
type Exec struct {
	// Command is the program and its arguments; the program is looked up in
	// PATH unless it contains a slash.
	Command []string `json:"command"`
	// Timeout bounds the run. Default DefaultTimeout.
	Timeout Duration `json:"timeout,omitempty"`
}

// Duration is a time.Duration written in JSON as a Go duration string, such
// as "30s" or "1m30s".
type Duration time.Duration

// String returns the duration in Go syntax.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a string such as "30s".
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a string such as "30s"; null leaves d unchanged.
// Anything else — a number, a string time.ParseDuration rejects — is an
// error.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("must be a duration string such as \"30s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("must be a duration such as \"30s\" or \"1m30s\", got %q", s)
	}
	*d = Duration(v)
	return nil
}

// Parse decodes and validates a job's action JSON and applies the defaults
// (method POST, timeout 30s). Unknown fields are rejected. Errors wrap
// sqlease.ErrInvalidConfig and name the field: action, action.http.url,
// action.http.method, action.http.headers, action.http.timeout,
// action.exec.command, action.exec.timeout, ….
func Parse(raw json.RawMessage) (Spec, error) {
	var wire struct {
		HTTP json.RawMessage `json:"http"`
		Exec json.RawMessage `json:"exec"`
	}
	if err := decodeStrict("action", raw, &wire); err != nil {
		return Spec{}, err
	}
	var s Spec
	if present(wire.HTTP) {
		var h struct {
			URL     string                     `json:"url"`
			Method  string                     `json:"method"`
			Headers map[string]json.RawMessage `json:"headers"`
			Body    string                     `json:"body"`
			Timeout json.RawMessage            `json:"timeout"`
		}
		if err := decodeStrict("action.http", wire.HTTP, &h); err != nil {
			return Spec{}, err
		}
		s.HTTP = &HTTP{URL: h.URL, Method: h.Method, Body: h.Body}
		for name, raw := range h.Headers {
			var v string
			if json.Unmarshal(raw, &v) == nil {
				if s.HTTP.Headers == nil {
					s.HTTP.Headers = map[string]string{}
				}
				s.HTTP.Headers[name] = v
				continue
			}
			var ref SecretRef
			if err := decodeStrict("action.http.headers."+name, raw, &ref); err != nil {
				return Spec{}, invalid("action.http.headers", "value of %q must be a string or {\"env\": \"NAME\"} or {\"file\": \"/path\"}", name)
			}
			if err := ref.validate(); err != nil {
				return Spec{}, invalid("action.http.headers", "value of %q: %v", name, err)
			}
			if s.HTTP.SecretHeaders == nil {
				s.HTTP.SecretHeaders = map[string]SecretRef{}
			}
			s.HTTP.SecretHeaders[name] = ref
		}
		if err := decodeDuration("action.http.timeout", h.Timeout, &s.HTTP.Timeout); err != nil {
			return Spec{}, err
		}
	}
	if present(wire.Exec) {
		var e struct {
			Command []string        `json:"command"`
			Timeout json.RawMessage `json:"timeout"`
		}
		if err := decodeStrict("action.exec", wire.Exec, &e); err != nil {
			return Spec{}, err
		}
		s.Exec = &Exec{Command: e.Command}
		if err := decodeDuration("action.exec.timeout", e.Timeout, &s.Exec.Timeout); err != nil {
			return Spec{}, err
		}
	}
	if err := s.Validate(); err != nil {
		return Spec{}, err
	}
	if s.HTTP != nil {
		s.HTTP.Method = s.HTTP.method()
		s.HTTP.Timeout = Duration(timeoutOrDefault(s.HTTP.Timeout))
	}
	if s.Exec != nil {
		s.Exec.Timeout = Duration(timeoutOrDefault(s.Exec.Timeout))
	}
	return s, nil
}

// ValidateJSON reports whether raw is a valid action: Parse's error, or
// nil. It fits scheduler.Config.ValidateAction. An HTTP action whose URL's
// host is an address (or localhost) the process's destination policy
// refuses (SetDestinationPolicy) is refused too, naming action.http.url:
// it could never be sent from here.
func ValidateJSON(raw json.RawMessage) error {
	s, err := Parse(raw)
	if err != nil {
		return err
	}
	if s.HTTP != nil {
		if err := checkURL(s.HTTP.URL); err != nil {
			return invalid("action.http.url", "%v", err)
		}
	}
	return nil
}

// Handle runs the action stored with the run (run.Action): Parse, then
// Spec.Run. It fits scheduler.Config.Handler in the daemon.
func Handle(ctx context.Context, run sqlease.Run) error {
	s, prep, err := parsePrepared(run.Action)
	if err != nil {
		return err
	}
	if s.HTTP != nil {
		return s.HTTP.runPrepared(ctx, run, prep)
	}
	return s.Exec.run(ctx, run)
}

// parsed holds the actions Handle parsed and validated, by their text: a
// fleet's jobs share a few actions, and parsing each run's anew was a
// seventh of the daemon's CPU when delivering thousands of runs a second.
// A Spec is never written after Parse, so runs share it.
var parsed struct {
	sync.RWMutex
	m map[string]parsedSpec
}

// parsedSpec is a cached action and, for an HTTP action, what its runs
// share (httpPrep).
type parsedSpec struct {
	spec Spec
	http *httpPrep
}

// Bounds of the parsed cache: it is emptied when full, and a large action
// is parsed every time.
const (
	maxParsed    = 1024
	maxParsedLen = 16 << 10
)

// parseCached is Parse, from the cache where it can.
func parseCached(raw json.RawMessage) (Spec, error) {
	s, _, err := parsePrepared(raw)
	return s, err
}

// parsePrepared is parseCached with an HTTP action's httpPrep (nil for an
// action too large to cache: runPrepared then prepares it for the run).
func parsePrepared(raw json.RawMessage) (Spec, *httpPrep, error) {
	parsed.RLock()
	c, ok := parsed.m[string(raw)]
	parsed.RUnlock()
	if ok {
		return c.spec, c.http, nil
	}
	s, err := Parse(raw)
	if err != nil || len(raw) > maxParsedLen {
		return s, nil, err
	}
	c = parsedSpec{spec: s}
	if s.HTTP != nil {
		if c.http, err = s.HTTP.prepare(); err != nil {
			return Spec{}, nil, fmt.Errorf("http action: %w", err)
		}
	}
	parsed.Lock()
	if parsed.m == nil || len(parsed.m) >= maxParsed {
		parsed.m = make(map[string]parsedSpec)
	}
	parsed.m[string(raw)] = c
	parsed.Unlock()
	return s, c.http, nil
}

// Validate checks s as Parse does (a zero method or timeout takes its
// default). Errors wrap sqlease.ErrInvalidConfig and name the field.
func (s Spec) Validate() error {
	switch {
	case s.HTTP == nil && s.Exec == nil:
		return invalid("action", "must have one of http and exec")
	case s.HTTP != nil && s.Exec != nil:
		return invalid("action", "must have only one of http and exec")
	case s.HTTP != nil:
		return s.HTTP.validate()
	default:
		return s.Exec.validate()
	}
}

// Run executes one attempt of the action for run and returns nil on success
// (a 2xx response, exit status 0). A failure's error is one line naming the
// cause — "exit status N", "killed by signal SIGNAME", "timed out after D",
// "HTTP status N …" — followed by the last line the command wrote or the
// first line of the response body (at most MaxErrorOutput bytes); an
// expired action timeout wraps ErrTimeout; a cancelled ctx stops the action
// (the request is aborted, the command's process group killed) and the
// error wraps ctx's error. An invalid s returns its Validate error without
// doing anything.
//
// Inside a run of a scheduler that keeps output (scheduler.OutputLimit), the
// tail of the action's output is kept with the run (scheduler.SetOutput):
// a command's standard output and error as one stream, or an HTTP
// response's status line and body. Secrets are replaced by Redaction in the
// output and the error: the values of an HTTP action's credential headers
// (SecretHeader) and of the secrets its headers reference, the credentials
// of an "Authorization: Scheme credentials" value, the password of its URL
// and the Basic credentials net/http derives from it, the values of the
// node's SQLEASE_SECRET_* variables and those registered by
// AddNodeSecrets — each also JSON-escaped, URL-escaped and in base64. An
// HTTP action to a destination the node's policy refuses is not sent
// (DestinationPolicy).
func (s Spec) Run(ctx context.Context, run sqlease.Run) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if s.HTTP != nil {
		return s.HTTP.run(ctx, run)
	}
	return s.Exec.run(ctx, run)
}

// runValue is one value of the run's identity as handed to an action: an
// HTTP header and, for a command, an environment variable.
type runValue struct{ header, env, value string }

// runValues returns the run's identity as API.md lists it.
func runValues(run sqlease.Run) []runValue {
	return []runValue{
		{"Idempotency-Key", "SQLEASE_IDEMPOTENCY_KEY", run.IdempotencyKey()},
		{"Sqlease-Job", "SQLEASE_JOB", run.Job},
		{"Sqlease-Scheduled-For", "SQLEASE_SCHEDULED_FOR", run.ScheduledFor.UTC().Format(time.RFC3339Nano)},
		{"Sqlease-Attempt", "SQLEASE_ATTEMPT", strconv.Itoa(run.Attempt)},
		{"Sqlease-Epoch", "SQLEASE_EPOCH", strconv.FormatInt(run.Epoch, 10)},
		{"Sqlease-Holder", "SQLEASE_HOLDER", run.Holder},
	}
}

// withTimeout derives the action's context; timedOut reports afterwards
// whether the action's own timeout (not the caller's context) stopped it.
func withTimeout(ctx context.Context, d Duration) (actx context.Context, cancel context.CancelFunc, timedOut func() bool) {
	actx, cancel = context.WithTimeoutCause(ctx, timeoutOrDefault(d), errTimeoutCause)
	return actx, cancel, func() bool { return errors.Is(context.Cause(actx), errTimeoutCause) }
}

// stopped returns the error for an action stopped by ctx (not its timeout).
func stopped(kind string, ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || cause == err {
		return fmt.Errorf("%s action: stopped: %w", kind, err)
	}
	return fmt.Errorf("%s action: stopped: %w: %w", kind, err, cause)
}

func timeoutOrDefault(d Duration) time.Duration {
	if d == 0 {
		return DefaultTimeout
	}
	return time.Duration(d)
}

func validateTimeout(field string, d Duration) error {
	if d < 0 || time.Duration(d) > MaxTimeout {
		return invalid(field, "must be between 0s (default %s) and %s, got %s", DefaultTimeout, MaxTimeout, d)
	}
	return nil
}

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s %s", sqlease.ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

func present(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && !bytes.Equal(t, []byte("null"))
}

// decodeStrict decodes one JSON object into v, rejecting unknown fields and
// trailing data, with errors naming field.
func decodeStrict(field string, raw json.RawMessage, v any) error {
	if !present(raw) {
		return invalid(field, "is required")
	}
	// encoding/json matches member names to fields in any case and keeps
	// the last of two members of one name; what reads the text another
	// way (Redact, IsExec, a person) would see another action than the one
	// that runs.
	if err := checkCanonical(field, raw, v); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		var syntaxErr *json.SyntaxError
		switch {
		case errors.As(err, &typeErr) && typeErr.Field == "headers" && typeErr.Type.Kind().String() == "string":
			return invalid(field+".headers", "values must be JSON strings, got %s", typeErr.Value)
		case errors.As(err, &typeErr) && typeErr.Field != "":
			return invalid(field+"."+typeErr.Field, "must be a JSON %s, got %s", jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
		case errors.As(err, &typeErr):
			return invalid(field, "must be a JSON object, got %s", typeErr.Value)
		case errors.As(err, &syntaxErr):
			return invalid(field, "is not valid JSON: %v", err)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return invalid(field, "has an %s", strings.TrimPrefix(err.Error(), "json: "))
		default:
			return invalid(field, "is not valid JSON: %v", err)
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid(field, "has data after the JSON object")
	}
	return nil
}

// checkCanonical refuses, naming the member under field, what
// strictjson.Check refuses.
func checkCanonical(field string, raw []byte, v any) error {
	err := strictjson.Check(raw, v, strictjson.Options{})
	var e *strictjson.Error
	if !errors.As(err, &e) {
		return nil
	}
	if e.Path != "" {
		field += "." + e.Path
	}
	return invalid(field, "%s", e.Problem)
}

func jsonKind(goKind string) string {
	switch goKind {
	case "slice", "array":
		return "array"
	case "map", "struct":
		return "object"
	}
	return goKind
}

func decodeDuration(field string, raw json.RawMessage, d *Duration) error {
	if !present(raw) {
		return nil
	}
	if err := d.UnmarshalJSON(bytes.TrimSpace(raw)); err != nil {
		return invalid(field, "%v", err)
	}
	return nil
}

// IsExec reports whether an action's JSON is an exec action: what Parse
// reads, or, for an action Parse refuses, whether any top-level member's
// name is "exec" in any case (encoding/json's reading) — so that a gate on
// exec actions is never passed by a spelling.
func IsExec(raw json.RawMessage) bool {
	if s, err := parseCached(raw); err == nil {
		return s.Exec != nil
	}
	var w map[string]json.RawMessage
	if json.Unmarshal(raw, &w) != nil {
		return false
	}
	for k, v := range w {
		if strings.EqualFold(k, "exec") && present(v) {
			return true
		}
	}
	return false
}

// SecretRef names a secret the node reads when it needs it: an
// environment variable of the node, or a file (read at each use, so a
// rotated secret applies at the next run). Exactly one is set.
//
// Whoever may create jobs must not be able to send any of the node's
// variables or files to a URL of their choosing — HTTP actions need no
// exec privilege — so the names are confined: variables must be named
// SQLEASE_SECRET_*, and files are paths relative to the directory named by
// the node's SQLEASE_SECRETS_DIR, opened without escaping it (no "..", no
// symbolic link out).
type SecretRef struct {
	Env  string `json:"env,omitempty"`
	File string `json:"file,omitempty"`
}

// SecretEnvPrefix starts the names of variables actions may reference;
// SecretsDirEnv names the variable holding the directory of secret files.
const (
	SecretEnvPrefix = "SQLEASE_SECRET_"
	SecretsDirEnv   = "SQLEASE_SECRETS_DIR"
)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (r SecretRef) validate() error {
	switch {
	case (r.Env == "") == (r.File == ""):
		return errors.New(`must name exactly one of "env" and "file"`)
	case r.Env != "" && (!envName.MatchString(r.Env) || !strings.HasPrefix(r.Env, SecretEnvPrefix) || r.Env == SecretEnvPrefix):
		return fmt.Errorf("env %q must be a variable named %s…", r.Env, SecretEnvPrefix)
	case r.File != "" && (filepath.IsAbs(r.File) || !filepath.IsLocal(r.File)):
		return fmt.Errorf("file %q must be a path inside the node's %s directory, relative to it", r.File, SecretsDirEnv)
	}
	return nil
}

// resolve reads the secret; surrounding whitespace of a file is dropped.
func (r SecretRef) resolve() (string, error) {
	if r.Env != "" {
		v, ok := os.LookupEnv(r.Env)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set on this node", r.Env)
		}
		return v, nil
	}
	dir := os.Getenv(SecretsDirEnv)
	if dir == "" {
		return "", fmt.Errorf("secret file %s: this node has no %s", r.File, SecretsDirEnv)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", fmt.Errorf("secret file %s: %w", r.File, err)
	}
	defer root.Close()
	f, err := root.Open(r.File)
	if err != nil {
		return "", fmt.Errorf("secret file %s: %w", r.File, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return "", fmt.Errorf("secret file %s: %w", r.File, err)
	}
	return strings.TrimSpace(string(b)), nil
}
