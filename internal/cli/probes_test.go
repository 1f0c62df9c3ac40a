package cli

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Probes never wait behind the request limit (issue 30 item 4): with every
// request slot held by slow bodies, /healthz and /readyz still answer 200;
// a request without credentials is refused before its body is read, so it
// holds no slot at all.
func TestProbesDoNotWaitForSlots(t *testing.T) {
	n := startNode(t, func(c *Config) { c.APIToken = testToken })
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	send := func(auth string) net.Conn {
		c, err := net.DialTimeout("tcp", n.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /v1/jobs HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", n.addr, auth)
		return c
	}
	// Unauthenticated slow bodies: answered 401 at once.
	for range 80 {
		c := send("")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 64)
		k, _ := c.Read(buf)
		if !strings.Contains(string(buf[:k]), " 401 ") {
			t.Fatalf("a slow body without credentials: %q, want 401 before the body", buf[:k])
		}
	}
	// Authenticated slow bodies take every slot.
	for range 80 {
		send("Authorization: Bearer " + testToken + "\r\n")
	}
	time.Sleep(200 * time.Millisecond)
	for _, path := range []string{"/healthz", "/readyz"} {
		began := time.Now()
		body, code := get(n.addr, path)
		if code != 200 {
			t.Errorf("%s with every request slot taken: %d %s", path, code, body)
		}
		t.Logf("%s answered in %s", path, time.Since(began))
	}
	if body, code := get(n.addr, "/v1/openapi.json"); code != http.StatusServiceUnavailable {
		t.Logf("note: a non-probe request got %d with every slot taken (%.60s)", code, body)
	}
}

// Probes stay answerable under a full connection table (issue 30 item 5):
// 300 idle keep-alive connections used to hold all 256 slots for 60 s,
// renewably, and a probe then timed out in the accept queue.
func TestProbesUnderFullConnectionTable(t *testing.T) {
	n := startNode(t, nil)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 300 {
		c, err := net.DialTimeout("tcp", n.addr, 2*time.Second)
		if err != nil {
			break
		}
		conns = append(conns, c)
		// One request each, then idle with the connection kept alive.
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", n.addr)
	}
	time.Sleep(300 * time.Millisecond)
	began := time.Now()
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + n.addr + "/readyz")
	if err != nil {
		t.Fatalf("/readyz with %d idle keep-alive connections: %v", len(conns), err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/readyz: %d", resp.StatusCode)
	}
	t.Logf("/readyz answered in %s with %d idle connections open", time.Since(began), len(conns))
	if tbl, ok := n.listener.(*connTable); ok {
		if open := tbl.open(); open > maxConnections+reserveConnections {
			t.Errorf("%d connections in the table, more than %d", open, maxConnections+reserveConnections)
		}
	}
}
