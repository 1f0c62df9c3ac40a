package httpapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/action"
	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/scheduler"
)

// FuzzDecodeJob: any body is either refused with a client error (a
// problem of status 4xx: the decoder's or the validator's) or accepted and
// then round-trips — encoded as the API shows it and decoded again, it is
// the same job (same content hash). Never a panic. The seeds are below and
// in testdata/fuzz/FuzzDecodeJob; run longer with
// go test -run '^$' -fuzz FuzzDecodeJob -fuzztime 5m ./httpapi
func FuzzDecodeJob(f *testing.F) {
	for _, seed := range []string{
		`{"name":"a","schedule":{"every":"10m"},"action":{"http":{"url":"http://127.0.0.1:9/","method":"POST","headers":{"X":"y"},"body":"{}","timeout":"30s"}}}`,
		`{"name":"b","schedule":{"cron":"0 9 * * 1-5","timezone":"Europe/Berlin"},"action":{"exec":{"command":["true"],"timeout":"5s"}},"missed_runs":"run_all","skip_if_older_than":"1h"}`,
		`{"name":"c","key":"k1","schedule":{"at":"2030-01-02T15:04:05Z"},"action":{"exec":{"command":["sh","-c","echo"]}},"retry":{"max_attempts":5,"backoff":"2s"},"lock_timeout":"2m"}`,
		`{"name":"d","schedule":{},"action":{"http":{"url":"https://u:p@h.example/x"}},"paused":true}`,
		`{"name":"e","schedule":{"every":"0s"}}`, `{"name":`, `[]`, `null`, "{\"name\":\"\xff\"}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		j, err := httpapi.DecodeJob(bytes.NewReader(body))
		if err != nil {
			clientError(t, err)
			return
		}
		prepared, hash, err := scheduler.Prepare(j, action.ValidateJSON)
		if err != nil {
			if !errors.Is(err, sqlease.ErrInvalidConfig) && !errors.Is(err, sqlease.ErrInvalidName) {
				t.Fatalf("validation error not marked as invalid input: %v", err)
			}
			return
		}
		// The API's form of it, fed back, is the same job — unless the
		// action had secrets, which reads show as ***.
		if !bytes.Equal(action.Redact(prepared.Action), prepared.Action) {
			return
		}
		out, err := json.Marshal(httpapi.JobOut(prepared))
		if err != nil {
			t.Fatal(err)
		}
		var req map[string]json.RawMessage
		if err := json.Unmarshal(out, &req); err != nil {
			t.Fatal(err)
		}
		for k := range req { // keep only what a request may carry
			switch k {
			case "name", "key", "schedule", "action", "missed_runs", "skip_if_older_than", "retry", "lock_timeout":
			default:
				delete(req, k)
			}
		}
		if state, _ := json.Marshal(j.Paused); j.Paused {
			req["paused"] = state
		}
		again, _ := json.Marshal(req)
		j2, err := httpapi.DecodeJob(bytes.NewReader(again))
		if err != nil {
			t.Fatalf("the API's own form %s does not decode: %v", again, err)
		}
		_, hash2, err := scheduler.Prepare(j2, action.ValidateJSON)
		if err != nil || hash2 != hash {
			t.Fatalf("round trip changed the job: %s → %s (%v)", body, again, err)
		}
	})
}

// clientError fails unless err is answered with a 4xx problem.
func clientError(t *testing.T, err error) {
	t.Helper()
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) || errors.Is(err, sqlease.ErrInvalidConfig) || errors.Is(err, sqlease.ErrInvalidName) {
		return
	}
	if status := httpapi.StatusOf(err); status < 400 || status > 499 {
		t.Fatalf("refused with status %d: %v", status, err)
	}
}
