package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease/action"
)

// TestLargeCheckpointHTTPAction: an HTTP action whose checkpoint is larger
// than a header should carry (action.MaxCheckpointHeaderBytes) gets its
// size in Sqlease-Checkpoint-Size instead, and reads it from its node with
// its run token; a small one still comes in Sqlease-Checkpoint. The first
// attempt saves and fails, the second is handed the checkpoint.
func TestLargeCheckpointHTTPAction(t *testing.T) {
	n := startNode(t, nil)
	for _, size := range []int{100, 10_000} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			want := fmt.Sprintf(`{"rows":%q}`, strings.Repeat("r", size))
			var mu sync.Mutex
			var got []string // what each attempt was handed: "header:…", "size:N fetched:…" or "none"
			done := make(chan struct{})
			recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				api, token := r.Header.Get("Sqlease-Api"), r.Header.Get("Sqlease-Run-Token")
				handed := "none"
				switch {
				case r.Header.Get("Sqlease-Checkpoint") != "":
					handed = "header:" + r.Header.Get("Sqlease-Checkpoint")
				case r.Header.Get("Sqlease-Checkpoint-Size") != "":
					req, _ := http.NewRequest("GET", api+"/v1/jobs/"+r.Header.Get("Sqlease-Job")+"/checkpoint", nil)
					req.Header.Set("Authorization", "Bearer "+token)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						handed = "fetch: " + err.Error()
						break
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					handed = fmt.Sprintf("size:%s status:%d fetched:%s", r.Header.Get("Sqlease-Checkpoint-Size"), resp.StatusCode, b)
				}
				mu.Lock()
				got = append(got, handed)
				attempt := len(got)
				mu.Unlock()
				if attempt > 1 {
					close(done)
					return
				}
				req, _ := http.NewRequest("PUT", api+"/v1/jobs/"+r.Header.Get("Sqlease-Job")+"/checkpoint", strings.NewReader(want))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Sqlease-Epoch", r.Header.Get("Sqlease-Epoch"))
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil || resp.StatusCode != http.StatusNoContent {
					t.Errorf("saving the checkpoint: %v %v", resp, err)
				}
				if resp != nil {
					resp.Body.Close()
				}
				w.WriteHeader(http.StatusInternalServerError)
			}))
			defer recv.Close()
			job, _ := json.Marshal(map[string]any{"name": "big-" + strconv.Itoa(size), "schedule": map[string]any{},
				"retry":  map[string]any{"max_attempts": 2, "backoff": "100ms"},
				"action": map[string]any{"http": map[string]any{"url": recv.URL, "method": "POST"}}})
			if r := n.call(t, "POST", "/v1/jobs", string(job)); r.status != http.StatusCreated {
				t.Fatalf("create: %d %s", r.status, r.body)
			}
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatalf("no second attempt within 20 s; log:\n%s", n.log.String())
			}
			mu.Lock()
			defer mu.Unlock()
			second := "header:" + want
			if size > action.MaxCheckpointHeaderBytes {
				second = fmt.Sprintf("size:%d status:200 fetched:%s", len(want), want)
			}
			if len(got) != 2 || got[0] != "none" || got[1] != second {
				t.Errorf("attempts were handed %.300q, want none, then %.100q", got, second)
			}
		})
	}
}
