package cli_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Slow and greedy clients cannot starve the node (issue 11): with hundreds
// of trickling connections (slowloris), a full connection table and
// parallel large listings, the leader keeps renewing its lease (3 s,
// renewed every 500 ms: a renewal may be late by 2 s on a machine the test
// suite keeps busy) — its epoch never changes and it never logs leader_lost;
// trickled headers are cut off by the server's timeout; and connections
// beyond the cap are not served until one frees.
func TestAbusiveClientsDoNotStarveTheLease(t *testing.T) {
	db, _ := sqliteURL(t)
	addr := freeAddr(t)
	log, _ := startServe(t, addr, map[string]string{}, "--db", db, "--http", addr,
		"--lease-duration", "3s", "--renew-interval", "500ms", "--acquire-interval", "200ms")
	epoch := readyz(t, addr)["lease_epoch"]
	for i := range 40 {
		body := fmt.Sprintf(`{"name":"big-%d","schedule":{"every":"1h"},"action":{"http":{"url":"http://127.0.0.1:9/","body":%q}}}`, i, strings.Repeat("x", 60<<10))
		resp, err := http.Post("http://"+addr+"/v1/jobs", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 {
			t.Fatalf("create: %d", resp.StatusCode)
		}
	}

	// Fill the connection table with clients that trickle their headers.
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 300 {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break // the kernel's backlog is full: fine
		}
		conns = append(conns, c)
		_, _ = c.Write([]byte("GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n"))
	}
	// Beyond the cap a request waits: not served while the table is full.
	c := http.Client{Timeout: 500 * time.Millisecond}
	if resp, err := c.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		t.Logf("note: a request was served with %d trickling connections open", len(conns))
	}
	// Greedy readers in parallel, while the trickling connections wait.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := http.Client{Timeout: 10 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := cl.Get("http://" + addr + "/v1/jobs?limit=1000")
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				} else {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	// The server cuts the trickling clients off after its header timeout;
	// then the others are served again.
	cut := 0
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range conns {
		_ = c.SetReadDeadline(deadline)
		if _, err := c.Read(make([]byte, 1)); err == nil || !isTimeout(err) {
			cut++ // closed (or answered 408) by the server
		}
	}
	if cut < len(conns) {
		t.Errorf("%d of %d trickling connections were still open after 10 s", len(conns)-cut, len(conns))
	}
	close(stop)
	wg.Wait()
	if body, code := get(addr, "/readyz"); code != 200 || !strings.Contains(body, "mode=leader") || !strings.Contains(body, "lease_epoch="+epoch) {
		t.Fatalf("after the abuse: %d %s, want the same leader at epoch %s", code, body, epoch)
	}
	if strings.Contains(log.String(), "leader_lost") {
		t.Fatalf("the leader lost its lease during the abuse:\n%s", log.String())
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
