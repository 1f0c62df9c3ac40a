package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAdvertiseURL: an action is given --advertise-url as SQLEASE_API, and
// the API answers requests addressed to that URL's host name (actions call
// it by that name), which a node without the setting refuses (421).
func TestAdvertiseURL(t *testing.T) {
	const url = "http://sqlease-node.test:8181"
	plain := startNode(t, nil)
	adv := startNode(t, func(c *Config) { c.AdvertiseURL = url + "/" })
	byName := func(n *testNode) int {
		req, err := http.NewRequest("GET", "http://"+n.addr+"/v1/jobs", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "sqlease-node.test:8181"
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := byName(plain); got != http.StatusMisdirectedRequest {
		t.Errorf("a node without --advertise-url answered a request to sqlease-node.test with %d, want 421", got)
	}
	if got := byName(adv); got != http.StatusOK {
		t.Errorf("a node advertising %s answered a request to its host name with %d, want 200", url, got)
	}

	for _, tc := range []struct {
		n    *testNode
		want string
	}{{adv, url}, {plain, "http://" + plain.addr}} {
		r := tc.n.call(t, "POST", "/v1/jobs", `{"name": "api", "schedule": {},
			"action": {"exec": {"command": ["sh", "-c", "printf '%s' \"$SQLEASE_API\""]}}}`)
		if r.status != http.StatusCreated {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var page struct {
				Runs []struct {
					Outcome string `json:"outcome"`
					Output  string `json:"output"`
				} `json:"runs"`
			}
			r := tc.n.call(t, "GET", "/v1/jobs/api/runs", "")
			if err := json.Unmarshal([]byte(r.body), &page); err != nil {
				t.Fatalf("runs: %d %s: %v", r.status, r.body, err)
			}
			if len(page.Runs) > 0 && page.Runs[0].Outcome == "succeeded" {
				if got := strings.TrimSpace(page.Runs[0].Output); got != tc.want {
					t.Errorf("the action got SQLEASE_API=%q, want %q", got, tc.want)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the job did not succeed within 15 s: %s\nlog:\n%s", r.body, tc.n.log.String())
			}
		}
	}
}
