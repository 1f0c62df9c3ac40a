package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/oascheck"
)

// TestOpenAPISingletons: a real daemon's answers on the singleton routes —
// which only a daemon serves — match the OpenAPI document it serves itself
// at /v1/openapi.json (httpapi's tests check the other routes).
func TestOpenAPISingletons(t *testing.T) {
	f := newFleet(t, sqliteDB(t))
	n := f.start("a")[0]
	code, doc := n.get("/v1/openapi.json")
	if code != 200 {
		t.Fatalf("GET /v1/openapi.json: %d", code)
	}
	c, err := oascheck.New([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	def := []byte(`{"name":"tick","command":["sleep","30"],"initial_state":{"n":0},"heartbeat":"1s","stop_timeout":"1s"}`)
	check := func(op, method, path string, body []byte) int {
		t.Helper()
		resp, b := n.do(t, method, path, "", body)
		if err := c.Check(op, resp.StatusCode, resp.Header.Get("Content-Type"), b); err != nil {
			t.Errorf("%s %s: %v", method, path, err)
		}
		return resp.StatusCode
	}
	want := func(got, want int, what string) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %d, want %d", what, got, want)
		}
	}
	want(check("POST /v1/singletons", "POST", "/v1/singletons", def), 201, "create")
	want(check("POST /v1/singletons", "POST", "/v1/singletons", def), 200, "identical create")
	want(check("POST /v1/singletons", "POST", "/v1/singletons", []byte(`{"name":"tick","command":["sleep","31"]}`)), 409, "clash")
	want(check("POST /v1/singletons", "POST", "/v1/singletons", []byte(`{"name":"Bad Name","command":["x"]}`)), 400, "invalid")
	deadline := time.Now().Add(20 * time.Second)
	for check("GET /v1/singletons/{name}", "GET", "/v1/singletons/tick", nil) == 200 && time.Now().Before(deadline) {
		if c, b := n.get("/v1/singletons/tick"); c == 200 && (contains(b, `"status":"running"`) || contains(b, `"status":"stale"`)) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	want(check("GET /v1/singletons", "GET", "/v1/singletons", nil), 200, "list")
	want(check("GET /v1/singletons/{name}", "GET", "/v1/singletons/none", nil), 404, "missing")
	// Without its run's token (and Sqlease-Epoch, which the helper does not
	// send): 401, the credentials are checked first.
	resp, b := n.do(t, "PUT", "/v1/singletons/tick/state", "not-the-run-token", []byte(`{"n":1}`))
	if err := c.Check("PUT /v1/singletons/{name}/state", resp.StatusCode, resp.Header.Get("Content-Type"), b); err != nil {
		t.Error(err)
	}
	want(resp.StatusCode, 401, "a save without the run's token")
	resp, b = n.do(t, "POST", "/v1/singletons/tick/heartbeat", "", nil)
	if err := c.Check("POST /v1/singletons/{name}/heartbeat", resp.StatusCode, resp.Header.Get("Content-Type"), b); err != nil {
		t.Error(err)
	}
	want(check("POST /v1/singletons/{name}/pause", "POST", "/v1/singletons/tick/pause", nil), 200, "pause")
	want(check("POST /v1/singletons/{name}/resume", "POST", "/v1/singletons/tick/resume", nil), 200, "resume")
	want(check("DELETE /v1/singletons/{name}", "DELETE", "/v1/singletons/tick", nil), 204, "delete")
	want(check("DELETE /v1/singletons/{name}", "DELETE", "/v1/singletons/tick", nil), 404, "delete again")
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
