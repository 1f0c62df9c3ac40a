package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/internal/syncbuf"
)

// testToken is the API token of the nodes that have one.
const testToken = "route-policy-token-0123456789"

// routeRow is what a route must be: its policy, and a request that names
// an object the route acts on (the hostile cases are derived from it).
type routeRow struct {
	auth    httpapi.Auth
	exec    httpapi.Exec
	body    bool // reads a body
	listing bool
	probe   bool
	// path is a concrete path for the pattern; body a valid body.
	path, reqBody string
}

// routeTable lists every route a node serves. A route the router has and
// the table does not fails TestRoutePolicies: a new surface states its
// policy here, and is driven with the hostile cases below.
var routeTable = map[string]routeRow{
	"GET /healthz":         {auth: httpapi.AuthPublic, probe: true, path: "/healthz"},
	"GET /readyz":          {auth: httpapi.AuthPublic, probe: true, path: "/readyz"},
	"GET /metrics":         {auth: httpapi.AuthPublic, path: "/metrics"},
	"GET /v1/openapi.json": {auth: httpapi.AuthPublic, path: "/v1/openapi.json"},

	"POST /v1/jobs":                {auth: httpapi.AuthToken, exec: httpapi.ExecByBody, body: true, path: "/v1/jobs", reqBody: execJobBody("rt-created")},
	"POST /v1/jobs:batch":          {auth: httpapi.AuthToken, exec: httpapi.ExecByBody, body: true, path: "/v1/jobs:batch", reqBody: "[" + execJobBody("rt-batched") + "]"},
	"POST /v1/jobs:pause":          {auth: httpapi.AuthToken, body: true, path: "/v1/jobs:pause", reqBody: `{"prefix":"rt-none"}`},
	"POST /v1/jobs:resume":         {auth: httpapi.AuthToken, body: true, path: "/v1/jobs:resume", reqBody: `{"prefix":"rt-none"}`},
	"GET /v1/jobs":                 {auth: httpapi.AuthToken, listing: true, path: "/v1/jobs"},
	"GET /v1/jobs/{name}":          {auth: httpapi.AuthToken, path: "/v1/jobs/rt-web"},
	"DELETE /v1/jobs/{name}":       {auth: httpapi.AuthToken, body: true, path: "/v1/jobs/rt-web"},
	"POST /v1/jobs/{name}/pause":   {auth: httpapi.AuthToken, body: true, path: "/v1/jobs/rt-web/pause"},
	"POST /v1/jobs/{name}/resume":  {auth: httpapi.AuthToken, body: true, path: "/v1/jobs/rt-web/resume"},
	"POST /v1/jobs/{name}/trigger": {auth: httpapi.AuthToken, body: true, path: "/v1/jobs/rt-web/trigger"},
	"GET /v1/jobs/{name}/runs":     {auth: httpapi.AuthToken, listing: true, path: "/v1/jobs/rt-web/runs"},
	// Called by a running action with its attempt's run token.
	"PUT /v1/jobs/{name}/checkpoint": {auth: httpapi.AuthRunSecret, body: true, path: "/v1/jobs/rt-web/checkpoint", reqBody: `{"n":1}`},
	"GET /v1/jobs/{name}/checkpoint": {auth: httpapi.AuthRunSecret, path: "/v1/jobs/rt-web/checkpoint"},
	"GET /v1/leases":                 {auth: httpapi.AuthToken, listing: true, path: "/v1/leases"},
	"GET /v1/leases/{name}/history":  {auth: httpapi.AuthToken, listing: true, path: "/v1/leases/sqlease-leader/history"},

	"POST /v1/singletons":                  {auth: httpapi.AuthToken, exec: httpapi.ExecAlways, body: true, path: "/v1/singletons", reqBody: `{"name":"rt-created","command":["sh","-c","sleep 60"]}`},
	"GET /v1/singletons":                   {auth: httpapi.AuthToken, listing: true, path: "/v1/singletons"},
	"GET /v1/singletons/{name}":            {auth: httpapi.AuthToken, path: "/v1/singletons/state"},
	"POST /v1/singletons/{name}/pause":     {auth: httpapi.AuthToken, body: true, path: "/v1/singletons/heartbeat/pause"},
	"POST /v1/singletons/{name}/resume":    {auth: httpapi.AuthToken, body: true, path: "/v1/singletons/heartbeat/resume"},
	"DELETE /v1/singletons/{name}":         {auth: httpapi.AuthToken, body: true, path: "/v1/singletons/heartbeat"},
	"PUT /v1/singletons/{name}/state":      {auth: httpapi.AuthRunSecret, body: true, path: "/v1/singletons/state/state", reqBody: `{"n":1}`},
	"POST /v1/singletons/{name}/heartbeat": {auth: httpapi.AuthRunSecret, path: "/v1/singletons/state/heartbeat"},

	"GET /{$}": {auth: httpapi.AuthDashboard, path: "/"},
	"/ui/":     {auth: httpapi.AuthDashboard, body: true, path: "/ui/jobs"},
}

func execJobBody(name string) string {
	return `{"name":"` + name + `","schedule":{"every":"1h"},"action":{"exec":{"command":["sh","-c","touch /nonexistent/rt"]}}}`
}

// testNode is a node of this package's tests, serving until the test ends.
type testNode struct {
	*Node
	addr string
	log  *syncbuf.Buffer
}

func startNode(t *testing.T, mutate func(c *Config)) *testNode {
	t.Helper()
	tn := runNode(t, mutate)
	for deadline := time.Now().Add(15 * time.Second); ; {
		if _, code := get(tn.addr, "/readyz"); code == 200 {
			return tn
		}
		if time.Now().After(deadline) {
			t.Fatalf("node not ready within 15 s; log:\n%s", tn.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runNode is startNode without the wait for readiness.
func runNode(t *testing.T, mutate func(c *Config)) *testNode {
	t.Helper()
	cfg := defaultConfig()
	cfg.DB = "sqlite:" + filepath.Join(t.TempDir(), "sqlease.db")
	cfg.HTTP = "127.0.0.1:0"
	cfg.LeaseDuration, cfg.RenewInterval, cfg.AcquireInterval = 2*time.Second, 300*time.Millisecond, 100*time.Millisecond
	cfg.LogLevel = "debug"
	if mutate != nil {
		mutate(&cfg)
	}
	logs := &syncbuf.Buffer{}
	n, err := NewNode(context.Background(), cfg, logs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("node did not stop; log:\n%s", logs.String())
		}
	})
	_, port, _ := net.SplitHostPort(n.Addr())
	return &testNode{Node: n, addr: net.JoinHostPort("127.0.0.1", port), log: logs}
}

func get(addr, path string) (string, int) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return err.Error(), 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode
}

type reply struct {
	status int
	body   string
}

// call sends one request; headers are name, value pairs.
func (n *testNode) call(t *testing.T, method, path, body string, headers ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+n.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	c := http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, string(b)}
}

// declared sends a request that declares a body of size bytes (and sends
// none of it) and returns the status of the answer.
func (n *testNode) declared(t *testing.T, method, path string, size int64) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", n.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		method, path, n.addr, testToken, size)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

// TestRoutePolicies holds every route of a real node to its row in
// routeTable, and drives each with hostile requests: no token and a wrong
// one (only public, run-secret and dashboard routes answer, and nothing
// changes), a body too large or where none belongs (413), and, on a node
// that refuses commands, every request that would create one (403, nothing
// created).
func TestRoutePolicies(t *testing.T) {
	tok := startNode(t, func(c *Config) { c.APIToken = testToken })
	routes := tok.Routes()
	seen := map[string]bool{}
	for _, r := range routes {
		seen[r.Pattern] = true
		row, ok := routeTable[r.Pattern]
		if !ok {
			t.Errorf("route %q has no row in routeTable: state its policy there (who may call it, whether it can run a command, its body, its listing budget)", r.Pattern)
			continue
		}
		p := r.Policy
		if p.Auth != row.auth || p.Exec != row.exec || (p.Body > 0) != row.body || p.Listing != row.listing || p.Probe != row.probe {
			t.Errorf("route %q: policy %+v, want auth %v exec %v body %v listing %v probe %v", r.Pattern, p, row.auth, row.exec, row.body, row.listing, row.probe)
		}
	}
	for pattern := range routeTable {
		if !seen[pattern] {
			t.Errorf("routeTable has %q, which the node does not serve", pattern)
		}
	}

	// Objects the routes act on.
	web := `{"name":"rt-web","schedule":{"every":"1h"},"action":{"http":{"url":"http://127.0.0.1:9/x"}}}`
	if r := tok.call(t, "POST", "/v1/jobs", web, bearer(testToken)...); r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	for _, name := range []string{"state", "heartbeat"} {
		body := `{"name":"` + name + `","command":["sh","-c","sleep 60"],"env":{"SECRET_SAUCE":"hunter2"}}`
		if r := tok.call(t, "POST", "/v1/singletons", body, bearer(testToken)...); r.status != 201 {
			t.Fatalf("create singleton: %d %s", r.status, r.body)
		}
	}

	// Listings past their byte budget: 40 jobs of 60 KiB actions, 12
	// singletons of 120 KiB definitions.
	for i := range 40 {
		body := fmt.Sprintf(`{"name":"big-%02d","schedule":{"every":"1h"},"action":{"http":{"url":"http://127.0.0.1:9/","body":%q}}}`, i, strings.Repeat("x", 60<<10))
		if r := tok.call(t, "POST", "/v1/jobs", body, bearer(testToken)...); r.status != 201 {
			t.Fatalf("create: %d %s", r.status, clip(r.body))
		}
	}
	for i := range 12 {
		pad := strings.Repeat("e", 15<<10)
		body := fmt.Sprintf(`{"name":"big-%02d","command":["sleep","60"],"env":{"PAD1":%q,"PAD2":%q,"PAD3":%q,"PAD4":%q},"initial_state":{"pad":%q}}`,
			i, pad, pad, pad, pad, strings.Repeat("s", 60<<10))
		if r := tok.call(t, "POST", "/v1/singletons", body, bearer(testToken)...); r.status != 201 {
			t.Fatalf("create singleton: %d %s", r.status, clip(r.body))
		}
	}

	for _, r := range routes {
		row := routeTable[r.Pattern]
		if row.path == "" {
			continue
		}
		method, _, _ := strings.Cut(r.Pattern, " ")
		if method == r.Pattern { // "/ui/": any method
			method = "GET"
		}
		t.Run(strings.ReplaceAll(r.Pattern, "/", "_"), func(t *testing.T) {
			for _, creds := range [][]string{nil, bearer("wrong-token-wrong-token")} {
				got := tok.call(t, method, row.path, row.reqBody, creds...)
				switch row.auth {
				case httpapi.AuthToken, httpapi.AuthRunSecret:
					if got.status != http.StatusUnauthorized {
						t.Errorf("%s %s with %v: %d %s, want 401", method, row.path, creds, got.status, clip(got.body))
					}
				case httpapi.AuthPublic:
					if got.status != http.StatusOK {
						t.Errorf("%s %s: %d, want 200 without the token", method, row.path, got.status)
					}
				case httpapi.AuthDashboard:
					if got.status != http.StatusOK && got.status != http.StatusSeeOther && got.status != http.StatusUnauthorized {
						t.Errorf("%s %s: %d", method, row.path, got.status)
					}
				}
				if row.auth != httpapi.AuthPublic {
					for _, secret := range []string{"hunter2", "rt-web", "sleep 60"} {
						if strings.Contains(got.body, secret) {
							t.Errorf("%s %s without credentials shows %q: %s", method, row.path, secret, clip(got.body))
						}
					}
				}
			}
			// A body where none belongs, or beyond the route's bound: the
			// declared length is refused before any of it is read.
			size := int64(httpapi.MaxBatchBytes + 8<<20) // beyond every bound, by more than is read before a 413
			if got := tok.declared(t, method, row.path, size); got != http.StatusRequestEntityTooLarge {
				t.Errorf("%s %s declaring a %d-byte body: %d, want 413", method, row.path, size, got)
			}
			// A listing asked for its most rows stays within its budget,
			// and says where to go on when it stopped short.
			if row.listing {
				got := tok.call(t, method, row.path+"?limit=1000", "", bearer(testToken)...)
				if got.status != 200 || len(got.body) > httpapi.MaxPageBytes+4<<10 {
					t.Errorf("%s %s?limit=1000: %d, %d bytes (budget %d)", method, row.path, got.status, len(got.body), httpapi.MaxPageBytes)
				}
				if (strings.HasPrefix(row.path, "/v1/jobs") && !strings.Contains(row.path, "/runs") || row.path == "/v1/singletons") &&
					!strings.Contains(got.body, `"next"`) {
					t.Errorf("%s %s: cut at the budget without next", method, row.path)
				}
			}
		})
	}
	// Nothing the refused requests sent was created.
	for _, path := range []string{"/v1/jobs/rt-created", "/v1/jobs/rt-batched", "/v1/singletons/rt-created"} {
		if r := tok.call(t, "GET", path, "", bearer(testToken)...); r.status != 404 {
			t.Errorf("GET %s: %d, want 404: a refused request created it", path, r.status)
		}
	}
}

func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// TestExecPolicyEverySurface: on a node that refuses commands — beyond
// loopback without a token, --allow-exec=false on loopback, or beyond
// loopback with a token but --allow-exec unset — no route creates anything
// that runs a command: exec jobs, batches holding one, singletons (whose
// command is an exec). Issue 30 item 1: singletons bypassed the gate.
func TestExecPolicyEverySurface(t *testing.T) {
	for name, mutate := range map[string]func(*Config){
		"beyond loopback, no token": func(c *Config) { c.HTTP = "0.0.0.0:0" },
		"allow-exec=false":          func(c *Config) { c.AllowExec = "false" },
		"token, allow-exec unset":   func(c *Config) { c.HTTP = "0.0.0.0:0"; c.APIToken = testToken },
		"token, allow-exec=false":   func(c *Config) { c.APIToken = testToken; c.AllowExec = "false" },
	} {
		t.Run(name, func(t *testing.T) {
			n := startNode(t, mutate)
			auth := bearer(testToken)
			marker := filepath.Join(t.TempDir(), "ran")
			cmd := `["sh","-c","id > ` + marker + `; sleep 300"]`
			for _, c := range []struct{ method, path, body string }{
				{"POST", "/v1/singletons", `{"name":"x","command":` + cmd + `}`},
				{"POST", "/v1/jobs", `{"name":"x","schedule":{},"action":{"exec":{"command":` + cmd + `}}}`},
				{"POST", "/v1/jobs:batch", `[{"name":"ok","schedule":{"every":"1h"}},{"name":"x","schedule":{},"action":{"exec":{"command":` + cmd + `}}}]`},
			} {
				r := n.call(t, c.method, c.path, c.body, auth...)
				if r.status != http.StatusForbidden {
					t.Errorf("%s %s: %d %s, want 403", c.method, c.path, r.status, clip(r.body))
				}
			}
			for _, path := range []string{"/v1/singletons/x", "/v1/jobs/x", "/v1/jobs/ok"} {
				if r := n.call(t, "GET", path, "", auth...); r.status != 404 {
					t.Errorf("GET %s: %d: a refused request created it", path, r.status)
				}
			}
			time.Sleep(300 * time.Millisecond)
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("a command ran on a node that refuses commands")
			}
		})
	}
}

// TestExecRefusedAtRunTime: rows written straight into the database (the
// CLI, or a node that allows commands) do not run on a node that refuses
// them: an exec job's run fails naming the policy, a singleton is never
// started. Issue 30 items 1 and 14.
func TestExecRefusedAtRunTime(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "sqlease.db")
	n := startNode(t, func(c *Config) {
		c.DB = db
		c.AllowExec = "false"
		c.PollInterval = 50 * time.Millisecond
		c.RefreshInterval = 50 * time.Millisecond
	})
	jobMarker, singletonMarker := filepath.Join(dir, "job-ran"), filepath.Join(dir, "singleton-ran")

	// The CLI, in an environment that allows commands, writes both.
	env := Env{Stdin: strings.NewReader(`{"name":"x","schedule":{},"action":{"exec":{"command":["touch","` + jobMarker + `"]}}}`),
		Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
	if code := Main(context.Background(), []string{"jobs", "add", "-f", "-", "--db", db}, env); code != 0 {
		t.Fatalf("jobs add: exit %d", code)
	}
	env.Stdin = strings.NewReader(`{"name":"s","command":["touch","` + singletonMarker + `"]}`)
	if code := Main(context.Background(), []string{"singletons", "add", "-f", "-", "--db", db}, env); code != 0 {
		t.Fatalf("singletons add: exit %d", code)
	}

	deadline := time.Now().Add(15 * time.Second)
	for {
		r := n.call(t, "GET", "/v1/jobs/x/runs", "")
		var runs httpapi.RunList
		_ = json.Unmarshal([]byte(r.body), &runs)
		if len(runs.Runs) > 0 && runs.Runs[0].Outcome == "failed" {
			if !strings.Contains(runs.Runs[0].Error, "--allow-exec=false") {
				t.Errorf("run error %q does not name the policy", runs.Runs[0].Error)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the exec job's run did not fail within 15 s: %s\n%s", r.body, n.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(n.log.String(), "singleton_refused") {
		time.Sleep(time.Second)
	}
	if !strings.Contains(n.log.String(), "singleton_refused") {
		t.Errorf("no singleton_refused in the log:\n%s", n.log.String())
	}
	for _, m := range []string{jobMarker, singletonMarker} {
		if _, err := os.Stat(m); err == nil {
			t.Errorf("%s: a command ran on a node with --allow-exec=false", filepath.Base(m))
		}
	}
	// The CLI refuses too when its environment says so.
	var errb bytes.Buffer
	env = Env{Stdin: strings.NewReader(`{"name":"y","command":["true"]}`), Stdout: io.Discard, Stderr: &errb,
		Getenv: func(k string) string { return map[string]string{"SQLEASE_ALLOW_EXEC": "false"}[k] }}
	if code := Main(context.Background(), []string{"singletons", "add", "-f", "-", "--db", db}, env); code == 0 || !strings.Contains(errb.String(), "--allow-exec=false") {
		t.Errorf("singletons add with SQLEASE_ALLOW_EXEC=false: exit %d, %q", code, errb.String())
	}
}
