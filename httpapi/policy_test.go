package httpapi_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease/httpapi"
)

// Request bodies share a node-wide memory budget (issue 30 item 15): a
// batch cost ~10× its size while decoded, and 64 of them in flight took a
// node to gigabytes. A body that finds the budget taken waits a moment,
// then is answered 503 before any of it is read.
func TestBodyMemoryBudget(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{noElector: true, configure: func(c *httpapi.Config) { c.BodyMemory = 1 << 20 }})
	addr := strings.TrimPrefix(n.srv.URL, "http://")
	open := func(size int) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "POST /v1/jobs HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", addr, size)
		return c
	}
	first := open(900 << 10) // holds 900 KiB of the budget while it trickles
	_ = first
	time.Sleep(100 * time.Millisecond)
	second := open(900 << 10)
	_ = second.SetReadDeadline(time.Now().Add(10 * time.Second))
	began := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(second), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a second body beyond the budget: %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	t.Logf("refused after %s", time.Since(began))
	// Small writes still fit beside the first.
	if res := n.do("POST", "/v1/jobs", `{"name":"small","schedule":{"every":"1h"},"action":{"http":{"url":"http://127.0.0.1:9/"}}}`); res.status != 201 {
		t.Fatalf("a small write beside it: %d %s", res.status, res.body)
	}
}

// Every answer carries X-Content-Type-Options: nosniff (issue 30 item 28):
// JSON answers echo what callers sent.
func TestNoSniffEverywhere(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{noElector: true})
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/jobs", ""},
		{"POST", "/v1/jobs", `{"name":"<script>x</script>","schedule":{}}`},
		{"POST", "/v1/jobs", `{"name":"ok-job","schedule":{"every":"1h"}}`},
		{"GET", "/v1/jobs/ok-job", ""},
		{"GET", "/healthz", ""},
		{"GET", "/nowhere", ""},
	} {
		req, _ := http.NewRequest(c.method, n.srv.URL+c.path, strings.NewReader(c.body))
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s %s (%d): X-Content-Type-Options %q", c.method, c.path, resp.StatusCode, got)
		}
	}
}
