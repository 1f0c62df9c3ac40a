package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/scheduler"
)

// oneRun is a Checkpoints with one attempt of job "ckpt" under epoch 7,
// secret "s3cret-token", that records what it saves and answers err.
type oneRun struct {
	mu    sync.Mutex
	saved []string
	err   error
	given json.RawMessage
}

func (o *oneRun) GivenCheckpoint(name, secret string) (json.RawMessage, error) {
	if err := o.Authenticate(name, secret); err != nil {
		return nil, err
	}
	return o.given, nil
}

func (o *oneRun) Authenticate(name, secret string) error {
	if name != "ckpt" || secret != "s3cret-token" {
		return httpapi.ErrUnauthorized
	}
	return nil
}

func (o *oneRun) SaveCheckpoint(_ context.Context, name string, epoch int64, secret string, v []byte) error {
	if err := o.Authenticate(name, secret); err != nil {
		return err
	}
	if epoch != 7 {
		return fmt.Errorf("%w: not this attempt's epoch", sqlease.ErrConflict)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return o.err
	}
	o.saved = append(o.saved, string(v))
	return nil
}

// TestCheckpointRoute: the route checks the secret first (one 401 for
// every caller without it, whatever the job), then the epoch header, then
// the body (a JSON value in UTF-8 within its bound: 400 naming the field,
// 413 beyond), and answers a deposed attempt as 409 and an ended one as
// 401.
func TestCheckpointRoute(t *testing.T) {
	runs := &oneRun{}
	n := newNode(t, dbPath(t), nodeOpts{noElector: true, configure: func(cfg *httpapi.Config) { cfg.Checkpoints = runs }})
	auth := func(token string) []string { return []string{"Authorization", "Bearer " + token, "Sqlease-Epoch", "7"} }
	put := func(path, body string, hdr ...string) (int, string) {
		r := n.do("PUT", path, body, hdr...)
		var p httpapi.Problem
		_ = json.Unmarshal(r.body, &p)
		return r.status, p.Detail
	}
	for _, c := range []struct {
		what   string
		path   string
		body   string
		hdr    []string
		status int
		detail string
	}{
		{"no token", "/v1/jobs/ckpt/checkpoint", `{"n":1}`, []string{"Sqlease-Epoch", "7"}, 401, "SQLEASE_RUN_TOKEN"},
		{"a wrong token", "/v1/jobs/ckpt/checkpoint", `{"n":1}`, auth("wrong"), 401, "SQLEASE_RUN_TOKEN"},
		{"another job", "/v1/jobs/other/checkpoint", `{"n":1}`, auth("s3cret-token"), 401, "SQLEASE_RUN_TOKEN"},
		{"no epoch", "/v1/jobs/ckpt/checkpoint", `{"n":1}`, []string{"Authorization", "Bearer s3cret-token"}, 400, "Sqlease-Epoch"},
		{"another epoch", "/v1/jobs/ckpt/checkpoint", `{"n":1}`, []string{"Authorization", "Bearer s3cret-token", "Sqlease-Epoch", "6"}, 409, "epoch"},
		{"invalid JSON", "/v1/jobs/ckpt/checkpoint", `{"n":`, auth("s3cret-token"), 400, "checkpoint"},
		{"invalid UTF-8", "/v1/jobs/ckpt/checkpoint", "\"\xff\"", auth("s3cret-token"), 400, "checkpoint"},
		{"too large", "/v1/jobs/ckpt/checkpoint", `"` + strings.Repeat("x", scheduler.MaxCheckpointBytes) + `"`, auth("s3cret-token"), 413, "body"},
		{"a checkpoint", "/v1/jobs/ckpt/checkpoint", `{"n":1}`, auth("s3cret-token"), 204, ""},
	} {
		status, detail := put(c.path, c.body, c.hdr...)
		if status != c.status || !strings.Contains(detail, c.detail) {
			t.Errorf("%s: %d %q, want %d naming %q", c.what, status, detail, c.status, c.detail)
		}
	}
	runs.err = fmt.Errorf("%w: the attempt is no longer current", sqlease.ErrConflict)
	if status, _ := put("/v1/jobs/ckpt/checkpoint", `{"n":2}`, auth("s3cret-token")...); status != 409 {
		t.Errorf("a deposed attempt's save: %d, want 409", status)
	}
	// The attempt ended between Authenticate and the save: the same 401 as
	// for a caller without the secret.
	runs.err = httpapi.ErrUnauthorized
	if status, detail := put("/v1/jobs/ckpt/checkpoint", `{"n":3}`, auth("s3cret-token")...); status != 401 || !strings.Contains(detail, "SQLEASE_RUN_TOKEN") {
		t.Errorf("an ended attempt's save: %d %q, want 401 naming SQLEASE_RUN_TOKEN", status, detail)
	}
	if got := strings.Join(runs.saved, ","); got != `{"n":1}` {
		t.Errorf("saved %s, want only the valid call's", got)
	}
}

// TestGivenCheckpointRoute: GET answers the attempt's own secret only (one
// 401 for everyone else), with the checkpoint it was handed, or 404 when
// it was handed none.
func TestGivenCheckpointRoute(t *testing.T) {
	runs := &oneRun{}
	n := newNode(t, dbPath(t), nodeOpts{noElector: true, configure: func(cfg *httpapi.Config) { cfg.Checkpoints = runs }})
	big := `{"rows":"` + strings.Repeat("r", 10000) + `"}`
	for _, c := range []struct {
		what   string
		path   string
		hdr    []string
		given  string
		status int
		body   string
	}{
		{"no token", "/v1/jobs/ckpt/checkpoint", nil, big, 401, "SQLEASE_RUN_TOKEN"},
		{"a wrong token", "/v1/jobs/ckpt/checkpoint", []string{"Authorization", "Bearer wrong"}, big, 401, "SQLEASE_RUN_TOKEN"},
		{"another job", "/v1/jobs/other/checkpoint", []string{"Authorization", "Bearer s3cret-token"}, big, 401, "SQLEASE_RUN_TOKEN"},
		{"none handed", "/v1/jobs/ckpt/checkpoint", []string{"Authorization", "Bearer s3cret-token"}, "", 404, "no checkpoint"},
		{"the one handed", "/v1/jobs/ckpt/checkpoint", []string{"Authorization", "Bearer s3cret-token"}, big, 200, big},
	} {
		runs.given = json.RawMessage(c.given)
		r := n.do("GET", c.path, "", c.hdr...)
		if r.status != c.status || !strings.Contains(string(r.body), c.body) {
			t.Errorf("%s: %d %.200s, want %d with %.40q", c.what, r.status, r.body, c.status, c.body)
		}
	}
}

// TestRunOutCheckpoint: the runs listing shows a run's checkpoint as
// saved, null when none, the node's secrets redacted — as a string when
// the redaction left no JSON.
func TestRunOutCheckpoint(t *testing.T) {
	t.Setenv("SQLEASE_SECRET_CKPT", "ckpt-secret-value")
	t.Setenv("SQLEASE_SECRET_NUM", "98765432")
	for in, want := range map[string]string{
		"":                               "null",
		`{"cursor": [1, 2]}`:             `{"cursor":[1,2]}`, // compacted, as every answer
		`{"token": "ckpt-secret-value"}`: `{"token":"[redacted]"}`,
		`{"n": 98765432}`:                `"{\"n\": [redacted]}"`,
	} {
		out := httpapi.RunOut(sqlease.Run{Checkpoint: json.RawMessage(in)})
		b, err := json.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Checkpoint json.RawMessage `json:"checkpoint"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		if string(v.Checkpoint) != want {
			t.Errorf("checkpoint %q shown as %s, want %s", in, v.Checkpoint, want)
		}
	}
}
