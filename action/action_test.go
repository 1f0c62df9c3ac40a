package action

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sqlease/sqlease"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == GuardArg {
		os.Exit(RunGuard(os.Args[2:])) // the guard of TestGuardianProcess
	}
	code := m.Run()
	httpTransport.CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testRun is a run with every field an action receives set to something
// distinctive; its time is not UTC, to check that actions get UTC.
func testRun(t *testing.T) sqlease.Run {
	t.Helper()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	return sqlease.Run{
		JobID:        7,
		Job:          "nightly-report",
		ScheduledFor: time.Date(2026, 4, 15, 12, 0, 0, 123456789, berlin),
		Attempt:      2,
		Holder:       "node-a",
		Epoch:        42,
	}
}

// testRunValues are testRun's values exactly as API.md says actions get them.
var testRunValues = map[string]string{
	"Idempotency-Key":       "nightly-report/2026-04-15T10:00:00.123456789Z",
	"Sqlease-Job":           "nightly-report",
	"Sqlease-Scheduled-For": "2026-04-15T10:00:00.123456789Z",
	"Sqlease-Attempt":       "2",
	"Sqlease-Epoch":         "42",
	"Sqlease-Holder":        "node-a",
}

func TestParseHTTP(t *testing.T) {
	s, err := Parse(json.RawMessage(`{"http": {"url": "http://127.0.0.1:9000/hook", "method": "POST",
		"headers": {"X-Team": "billing"}, "body": "{}", "timeout": "1m30s"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Spec{HTTP: &HTTP{URL: "http://127.0.0.1:9000/hook", Method: "POST", Headers: map[string]string{"X-Team": "billing"}, Body: "{}", Timeout: Duration(90 * time.Second)}}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("Parse = %+v, want %+v", s.HTTP, want.HTTP)
	}
}

func TestParseDefaults(t *testing.T) {
	s, err := Parse(json.RawMessage(`{"http": {"url": "https://example.com/x", "method": "put"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.HTTP.Method != "PUT" || s.HTTP.Timeout != Duration(DefaultTimeout) {
		t.Errorf("method %q timeout %s, want PUT and %s", s.HTTP.Method, s.HTTP.Timeout, DefaultTimeout)
	}
	s, err = Parse(json.RawMessage(`{"http": {"url": "https://example.com/x", "timeout": null}}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.HTTP.Method != DefaultMethod || s.HTTP.Timeout != Duration(DefaultTimeout) {
		t.Errorf("method %q timeout %s, want %s and %s", s.HTTP.Method, s.HTTP.Timeout, DefaultMethod, DefaultTimeout)
	}
	s, err = Parse(json.RawMessage(`{"exec": {"command": ["/bin/true"]}, "http": null}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Spec{Exec: &Exec{Command: []string{"/bin/true"}, Timeout: Duration(DefaultTimeout)}}); !reflect.DeepEqual(s, want) {
		t.Errorf("Parse = %+v, want %+v", s.Exec, want.Exec)
	}
}

func TestParseRejects(t *testing.T) {
	for _, tc := range []struct {
		name, raw, field, rule string
	}{
		{"empty", ``, "action", "required"},
		{"null", `null`, "action", "required"},
		{"array", `[]`, "action", "object"},
		{"not JSON", `{"http":`, "action", "JSON"},
		{"trailing data", `{"exec": {"command": ["x"]}} {}`, "action", "after"},
		{"neither", `{}`, "action", "one of http and exec"},
		{"both", `{"http": {"url": "http://a/"}, "exec": {"command": ["x"]}}`, "action", "only one of http and exec"},
		{"unknown top-level field", `{"http": {"url": "http://a/"}, "shell": "rm -rf /"}`, "action", `unknown field "shell"`},
		{"unknown http field", `{"http": {"url": "http://a/", "verb": "GET"}}`, "action.http", `unknown field "verb"`},
		{"unknown exec field", `{"exec": {"command": ["x"], "shell": true}}`, "action.exec", `unknown field "shell"`},
		{"http not an object", `{"http": "http://a/"}`, "action.http", "object"},
		{"url missing", `{"http": {"method": "GET"}}`, "action.http.url", "required"},
		{"url relative", `{"http": {"url": "/hook"}}`, "action.http.url", "absolute http or https"},
		{"url ftp", `{"http": {"url": "ftp://example.com/x"}}`, "action.http.url", "absolute http or https"},
		{"url no host", `{"http": {"url": "http:///x"}}`, "action.http.url", "absolute http or https"},
		{"url unparsable", `{"http": {"url": "http://[::1"}}`, "action.http.url", "absolute http or https"},
		{"url a number", `{"http": {"url": 80}}`, "action.http.url", "string"},
		{"method unknown", `{"http": {"url": "http://a/", "method": "FETCH"}}`, "action.http.method", "GET, HEAD, POST"},
		{"method CONNECT", `{"http": {"url": "http://a/", "method": "CONNECT"}}`, "action.http.method", "GET, HEAD, POST"},
		{"headers not an object", `{"http": {"url": "http://a/", "headers": ["X-A: b"]}}`, "action.http.headers", "object"},
		{"header value not a string", `{"http": {"url": "http://a/", "headers": {"X-A": 1}}}`, "action.http.headers", "string"},
		{"header name invalid", `{"http": {"url": "http://a/", "headers": {"X Team": "b"}}}`, "action.http.headers", "invalid header name"},
		{"header value with newline", `{"http": {"url": "http://a/", "headers": {"X-A": "b\r\nX-B: c"}}}`, "action.http.headers", "CR, LF"},
		{"timeout a number", `{"http": {"url": "http://a/", "timeout": 30}}`, "action.http.timeout", `duration string such as "30s"`},
		{"timeout unparsable", `{"http": {"url": "http://a/", "timeout": "30 seconds"}}`, "action.http.timeout", `"30 seconds"`},
		{"timeout negative", `{"http": {"url": "http://a/", "timeout": "-1s"}}`, "action.http.timeout", "between"},
		{"timeout too long", `{"http": {"url": "http://a/", "timeout": "25h"}}`, "action.http.timeout", "between"},
		{"command missing", `{"exec": {}}`, "action.exec.command", "non-empty array"},
		{"command empty", `{"exec": {"command": []}}`, "action.exec.command", "non-empty array"},
		{"command empty program", `{"exec": {"command": ["", "x"]}}`, "action.exec.command", "non-empty array"},
		{"command a string", `{"exec": {"command": "echo hi"}}`, "action.exec.command", "array"},
		{"command with NUL", `{"exec": {"command": ["echo", "a\u0000b"]}}`, "action.exec.command", "NUL"},
		{"exec timeout bad", `{"exec": {"command": ["x"], "timeout": "soon"}}`, "action.exec.timeout", `"soon"`},
		{"exec timeout too long", `{"exec": {"command": ["x"], "timeout": "48h"}}`, "action.exec.timeout", "between"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(json.RawMessage(tc.raw))
			if err == nil {
				t.Fatalf("Parse(%s) = nil error", tc.raw)
			}
			if !errors.Is(err, sqlease.ErrInvalidConfig) {
				t.Errorf("error %q does not wrap ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), ": "+tc.field+" ") && !strings.Contains(err.Error(), ": "+tc.field+".") {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.rule) {
				t.Errorf("error %q does not state %q", err, tc.rule)
			}
			if err := ValidateJSON(json.RawMessage(tc.raw)); err == nil {
				t.Errorf("ValidateJSON(%s) = nil", tc.raw)
			}
		})
	}
}

func TestDurationJSON(t *testing.T) {
	b, err := json.Marshal(Spec{Exec: &Exec{Command: []string{"x"}, Timeout: Duration(90 * time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"exec":{"command":["x"],"timeout":"1m30s"}}`; string(b) != want {
		t.Errorf("Marshal = %s, want %s", b, want)
	}
	s, err := Parse(b)
	if err != nil || time.Duration(s.Exec.Timeout) != 90*time.Second {
		t.Errorf("round trip: %+v, %v", s.Exec, err)
	}
	var d Duration
	for _, bad := range []string{`30`, `"30"`, `"abc"`, `true`, `{}`} {
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("Unmarshal(%s) = nil error", bad)
		}
	}
	if err := json.Unmarshal([]byte(`"250ms"`), &d); err != nil || d != Duration(250*time.Millisecond) {
		t.Errorf("Unmarshal(250ms) = %s, %v", d, err)
	}
	if d.String() != "250ms" {
		t.Errorf("String = %q", d.String())
	}
}

func TestRunRejectsInvalidSpec(t *testing.T) {
	for _, s := range []Spec{
		{},
		{HTTP: &HTTP{URL: "http://a/"}, Exec: &Exec{Command: []string{"true"}}},
		{HTTP: &HTTP{URL: "mailto:x@example.com"}},
		{Exec: &Exec{}},
	} {
		if err := s.Run(context.Background(), testRun(t)); !errors.Is(err, sqlease.ErrInvalidConfig) {
			t.Errorf("Run(%+v) = %v, want ErrInvalidConfig", s, err)
		}
	}
}

func TestHandle(t *testing.T) {
	run := testRun(t)
	run.Action = json.RawMessage(`{"exec": {"command": ["sh", "-c", "test \"$SQLEASE_JOB\" = nightly-report"]}}`)
	if err := Handle(context.Background(), run); err != nil {
		t.Errorf("Handle = %v", err)
	}
	run.Action = json.RawMessage(`{"exec": {"command": ["sh", "-c", "exit 4"]}}`)
	if err := Handle(context.Background(), run); err == nil || !strings.Contains(err.Error(), "exit status 4") {
		t.Errorf("Handle = %v, want exit status 4", err)
	}
	run.Action = json.RawMessage(`{}`)
	if err := Handle(context.Background(), run); !errors.Is(err, sqlease.ErrInvalidConfig) {
		t.Errorf("Handle(empty action) = %v, want ErrInvalidConfig", err)
	}
}

func TestErrTimeoutIsTimedOut(t *testing.T) {
	if !errors.Is(fmt.Errorf("x: %w", ErrTimeout), sqlease.ErrTimedOut) {
		t.Error("ErrTimeout does not match sqlease.ErrTimedOut")
	}
}

func ExampleParse() {
	s, err := Parse([]byte(`{"http": {"url": "https://hooks.example/report", "headers": {"X-Team": "billing"}}}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(s.HTTP.Method, s.HTTP.URL, s.HTTP.Timeout)

	_, err = Parse([]byte(`{"exec": {"command": ["report"], "timeout": "2 days"}}`))
	fmt.Println(err)
	// Output:
	// POST https://hooks.example/report 30s
	// sqlease: invalid configuration: action.exec.timeout must be a duration such as "30s" or "1m30s", got "2 days"
}

// Handle keeps parsed actions: runs of one action share it concurrently,
// each sending its own identity, an invalid action is refused every time,
// and the cache stays within its bound.
func TestHandleSharesParsedActions(t *testing.T) {
	srv, seen := recordingServer(t, http.StatusNoContent, "")
	raw := json.RawMessage(`{"http": {"url": "` + srv.URL + `/hook", "headers": {"X-Team": "billing"}}}`)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			run := testRun(t)
			run.Job, run.Action = fmt.Sprintf("job-%02d", i), raw
			if err := Handle(context.Background(), run); err != nil {
				t.Errorf("Handle = %v", err)
			}
		})
	}
	wg.Wait()
	jobs := map[string]bool{}
	for _, r := range seen() {
		if r.header.Get("X-Team") != "billing" {
			t.Errorf("X-Team = %q", r.header.Get("X-Team"))
		}
		jobs[r.header.Get("Sqlease-Job")] = true
	}
	if len(jobs) != 50 {
		t.Errorf("%d distinct Sqlease-Job headers over 50 runs, want 50", len(jobs))
	}
	bad := testRun(t)
	bad.Action = json.RawMessage(`{"http": {"url": "mailto:x@example.com"}}`)
	for range 2 {
		if err := Handle(context.Background(), bad); !errors.Is(err, sqlease.ErrInvalidConfig) {
			t.Errorf("Handle(invalid) = %v, want ErrInvalidConfig", err)
		}
	}
	for i := range maxParsed + 10 {
		if _, err := parseCached(json.RawMessage(fmt.Sprintf(`{"exec": {"command": ["true", "%d"]}}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	parsed.RLock()
	n := len(parsed.m)
	parsed.RUnlock()
	if n > maxParsed {
		t.Errorf("%d parsed actions kept, bound %d", n, maxParsed)
	}
}
