package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sqlease/sqlease/action"
	"github.com/sqlease/sqlease/httpapi"
)

const execJob = `{"name":"pwn","schedule":{},"action":{"exec":{"command":["touch","pwned"]}}}`

// A web page the user visits must not be able to change anything: the
// "simple" cross-site requests browsers send without a CORS preflight
// (text/plain, form encodings) and anything marked cross-site by Origin or
// Sec-Fetch-Site are refused, and nothing is created.
func TestCrossSiteWritesRefused(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{})
	for _, c := range []struct {
		name   string
		hdr    []string
		status int
	}{
		{"text/plain", []string{"Content-Type", "text/plain"}, http.StatusUnsupportedMediaType},
		{"form", []string{"Content-Type", "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType},
		{"multipart", []string{"Content-Type", "multipart/form-data; boundary=x"}, http.StatusUnsupportedMediaType},
		{"no content type", []string{"Content-Type", ""}, http.StatusUnsupportedMediaType},
		{"cross-site origin", []string{"Origin", "http://evil.example"}, http.StatusForbidden},
		{"null origin", []string{"Origin", "null"}, http.StatusForbidden},
		{"sec-fetch-site cross-site", []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"sec-fetch-site same-site", []string{"Sec-Fetch-Site", "same-site"}, http.StatusForbidden},
		{"the attack as reported", []string{"Content-Type", "text/plain", "Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := n.do("POST", "/v1/jobs", execJob, c.hdr...)
			res.problem(t, c.status)
		})
	}
	if names := n.jobNames(); len(names) != 0 {
		t.Fatalf("cross-site requests created %v", names)
	}
	// Same-origin browsers and non-browser clients pass.
	res := n.do("POST", "/v1/jobs", `{"name":"ok","schedule":{"every":"1h"},"action":{"http":{"url":"http://127.0.0.1:9/"}}}`, "Origin", n.srv.URL, "Sec-Fetch-Site", "same-origin")
	if res.status != 201 {
		t.Fatalf("same-origin create: %d %s", res.status, res.body)
	}
	if res := n.do("POST", "/v1/jobs/ok/pause", ""); res.status != 200 {
		t.Fatalf("a body-less POST without Content-Type: %d %s", res.status, res.body)
	}
	if res := n.do("POST", "/v1/jobs/ok/resume", "", "Origin", "http://evil.example"); res.status != http.StatusForbidden {
		t.Fatalf("a cross-site body-less POST: %d %s", res.status, res.body)
	}
}

// DNS rebinding: the node answers only to the names it is reached by.
func TestHostCheck(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{configure: func(c *httpapi.Config) { c.AllowedHosts = []string{"sqlease.internal"} }})
	for _, host := range []string{"evil.example:8080", "evil.example", "127.0.0.1.evil.example"} {
		for _, path := range []string{"/v1/jobs", "/healthz"} {
			res := n.do("GET", path, "", "Host", host)
			if res.status != http.StatusMisdirectedRequest {
				t.Errorf("Host %s %s: %d, want 421", host, path, res.status)
			}
		}
	}
	for _, host := range []string{"localhost:8080", "127.0.0.1", "[::1]:8080", "sqlease.internal:443", "SQLEASE.internal"} {
		if res := n.do("GET", "/v1/jobs", "", "Host", host); res.status != 200 {
			t.Errorf("Host %s: %d %s", host, res.status, res.body)
		}
	}
	// Listening on a wildcard address, an IP literal is fine (rebinding
	// needs a name); a specific address accepts itself only.
	wild := newNode(t, dbPath(t), nodeOpts{configure: func(c *httpapi.Config) { c.ListenAddr = "0.0.0.0:8080" }})
	if res := wild.do("GET", "/v1/jobs", "", "Host", "10.1.2.3:8080"); res.status != 200 {
		t.Errorf("wildcard listener, IP Host: %d", res.status)
	}
	one := newNode(t, dbPath(t), nodeOpts{configure: func(c *httpapi.Config) { c.ListenAddr = "10.1.2.3:8080" }})
	if res := one.do("GET", "/v1/jobs", "", "Host", "10.9.9.9:8080"); res.status != http.StatusMisdirectedRequest {
		t.Errorf("another IP: %d", res.status)
	}
}

// Exec is a privilege: off unless allowed, and never without a token when
// the node listens beyond loopback.
func TestExecIsAPrivilege(t *testing.T) {
	off := newNode(t, dbPath(t), nodeOpts{configure: func(c *httpapi.Config) { c.Exec = action.ExecPolicy{} }})
	p := off.do("POST", "/v1/jobs", execJob).problem(t, http.StatusForbidden)
	if !strings.Contains(p.Detail, "--allow-exec") {
		t.Errorf("detail %q does not say how to opt in", p.Detail)
	}
	if res := off.do("POST", "/v1/jobs", `{"name":"web","schedule":{},"action":{"http":{"url":"http://127.0.0.1:9/x"}}}`); res.status != 201 {
		t.Errorf("an HTTP action on a node without exec: %d %s", res.status, res.body)
	}
	public := newNode(t, dbPath(t), nodeOpts{configure: func(c *httpapi.Config) {
		c.ListenAddr = "0.0.0.0:8080"
		c.Exec = action.NewExecPolicy("true", false, false)
	}})
	p = public.do("POST", "/v1/jobs", execJob).problem(t, http.StatusForbidden)
	if !strings.Contains(p.Detail, "token") {
		t.Errorf("detail %q", p.Detail)
	}
	tokened := newNode(t, dbPath(t), nodeOpts{configure: func(c *httpapi.Config) {
		c.ListenAddr = "0.0.0.0:8080"
		c.APIToken = "0123456789abcdef"
		c.Exec = action.NewExecPolicy("true", false, true)
	}})
	if res := tokened.do("POST", "/v1/jobs", execJob, "Authorization", "Bearer 0123456789abcdef"); res.status != 201 {
		t.Errorf("exec with a token beyond loopback: %d %s", res.status, res.body)
	}
}

// Secrets in actions are not shown by reads.
func TestActionSecretsRedacted(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{})
	job := `{"name":"hook","schedule":{"every":"1h"},"action":{"http":{"url":"https://svc:hunter2@api.example/hook",` +
		`"headers":{"Authorization":"Bearer tok-123","X-Api-Key":"key-456","X-Team":"billing"}}}}`
	res := n.do("POST", "/v1/jobs", job)
	if res.status != 201 {
		t.Fatalf("create: %d %s", res.status, res.body)
	}
	for _, r := range []response{res, n.do("GET", "/v1/jobs/hook", ""), n.do("GET", "/v1/jobs", "")} {
		body := string(r.body)
		for _, secret := range []string{"hunter2", "tok-123", "key-456"} {
			if strings.Contains(body, secret) {
				t.Errorf("%q shown: %s", secret, body)
			}
		}
		if !strings.Contains(body, "billing") || !strings.Contains(body, "svc:***@api.example") {
			t.Errorf("redacted too much or not at all: %s", body)
		}
	}
	// The same content is still recognised as a retry.
	if res := n.do("POST", "/v1/jobs", job); res.status != 200 {
		t.Errorf("identical create: %d %s", res.status, res.body)
	}
}

// Bad bytes and oversized actions are refused with a 400 and change nothing.
func TestBadInputRefused(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{})
	for name, body := range map[string]string{
		"NUL in key":       `{"name":"a","key":"x\u0000y","schedule":{}}`,
		"NUL in header":    `{"name":"a","schedule":{},"action":{"http":{"url":"http://127.0.0.1:9/","headers":{"X":"a\u0000"}}}}`,
		"invalid UTF-8":    "{\"name\":\"a\",\"key\":\"\xff\xfe\",\"schedule\":{}}",
		"truncated":        `{"name":"a","schedule":{`,
		"huge action":      `{"name":"a","schedule":{},"action":{"http":{"url":"http://127.0.0.1:9/","body":"` + strings.Repeat("x", 70<<10) + `"}}}`,
		"zero every":       `{"name":"a","schedule":{"every":"0s"}}`,
		"at the zero time": `{"name":"a","schedule":{"at":"0001-01-01T00:00:00Z"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			n.do("POST", "/v1/jobs", body).problem(t, http.StatusBadRequest)
		})
	}
	if names := n.jobNames(); len(names) != 0 {
		t.Fatalf("bad input created %v", names)
	}
}
