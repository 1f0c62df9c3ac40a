package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/action"
	"github.com/sqlease/sqlease/httpapi"
)

// noSingletons (openapi_test.go) pages through none and authenticates
// nobody.
func (noSingletons) Page(context.Context, string, int) ([]httpapi.Singleton, error) {
	return nil, nil
}
func (noSingletons) Authenticate(string, string) error { return httpapi.ErrUnauthorized }

// fakeSingletons holds singletons in memory; the one named run runs here
// under epoch 3 with the secret "s3cret".
type fakeSingletons struct {
	noSingletons
	all   map[string]httpapi.Singleton
	pages atomic.Int64 // Page calls
	saved atomic.Int64 // SaveState calls that wrote
}

const fakeRun, fakeSecret, fakeEpoch = "run", "s3cret", 3

func (f *fakeSingletons) Page(_ context.Context, after string, limit int) ([]httpapi.Singleton, error) {
	f.pages.Add(1)
	var names []string
	for n := range f.all {
		if n > after {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var out []httpapi.Singleton
	for _, n := range names[:min(limit, len(names))] {
		out = append(out, f.all[n])
	}
	return out, nil
}

func (f *fakeSingletons) Get(_ context.Context, name string) (httpapi.Singleton, error) {
	if s, ok := f.all[name]; ok {
		return s, nil
	}
	return httpapi.Singleton{}, sqlease.ErrNoJob
}

func (f *fakeSingletons) Authenticate(name, secret string) error {
	if name == fakeRun && secret == fakeSecret {
		return nil
	}
	return httpapi.ErrUnauthorized
}

func (f *fakeSingletons) check(name string, epoch int64, secret string) error {
	if err := f.Authenticate(name, secret); err != nil {
		return err
	}
	if epoch != fakeEpoch {
		return fmt.Errorf("%w: epoch %d is no longer current", sqlease.ErrConflict, epoch)
	}
	return nil
}

func (f *fakeSingletons) SaveState(_ context.Context, name string, epoch int64, secret string, _ []byte) error {
	if err := f.check(name, epoch, secret); err != nil {
		return err
	}
	f.saved.Add(1)
	return nil
}

func (f *fakeSingletons) Heartbeat(_ context.Context, name string, epoch int64, secret string) error {
	return f.check(name, epoch, secret)
}

func singletonNode(t *testing.T, f *fakeSingletons, token string) (*node, http.Handler) {
	var h http.Handler
	n := newNode(t, dbPath(t), nodeOpts{noElector: true, configure: func(c *httpapi.Config) {
		c.Singletons, c.APIToken = f, token
		h = httpapi.New(*c)
	}})
	return n, h
}

// GET /v1/singletons pages like the jobs (issue 30, item 7): 40 singletons
// of about 1 MB (env and state) made a 38.8 MB list; now every page is
// within MaxPageBytes, limit and after work, and paging returns each once.
func TestSingletonsPaged(t *testing.T) {
	f := &fakeSingletons{all: map[string]httpapi.Singleton{}}
	for i := range 40 {
		name := fmt.Sprintf("s%02d", i)
		f.all[name] = httpapi.Singleton{Name: name, Command: []string{"true"}, Status: "unplaced",
			Env:   map[string]action.EnvValue{"BIG": {Value: strings.Repeat("e", 900<<10)}},
			State: json.RawMessage(`"` + strings.Repeat("s", 64<<10) + `"`)}
	}
	n, _ := singletonNode(t, f, "")
	seen := map[string]bool{}
	pages, total := getPages(t, n, "/v1/singletons", func(body []byte) (int, string) {
		var l httpapi.SingletonList
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatal(err)
		}
		for _, s := range l.Singletons {
			if seen[s.Name] {
				t.Fatalf("%s on two pages", s.Name)
			}
			seen[s.Name] = true
		}
		return len(l.Singletons), l.Next
	})
	if total != 40 || pages != 40 {
		t.Fatalf("%d singletons in %d pages, want 40 in 40 (one per page)", total, pages)
	}
	// Small ones: limit and after page by name.
	f.all = map[string]httpapi.Singleton{}
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		f.all[name] = httpapi.Singleton{Name: name, Command: []string{"true"}, Status: "unplaced"}
	}
	var l httpapi.SingletonList
	n.do("GET", "/v1/singletons?limit=2&after=a", "").json(t, &l)
	if len(l.Singletons) != 2 || l.Singletons[0].Name != "b" || l.Next != "c" {
		t.Fatalf("limit=2 after=a: %+v", l)
	}
	l = httpapi.SingletonList{}
	n.do("GET", "/v1/singletons?limit=10", "").json(t, &l)
	if len(l.Singletons) != 5 || l.Next != "" {
		t.Fatalf("all: %+v", l)
	}
	n.do("GET", "/v1/singletons?limit=0", "").problem(t, 400)
}

// A singleton named state or heartbeat is no way around the API token
// (issue 30, item 16): processPath exempted any path ending in /state or
// /heartbeat, so GET /v1/singletons/state answered 200 with env and state
// to anyone.
func TestSingletonNamedStateNeedsToken(t *testing.T) {
	f := &fakeSingletons{all: map[string]httpapi.Singleton{}}
	for _, name := range []string{"state", "heartbeat"} {
		f.all[name] = httpapi.Singleton{Name: name, Command: []string{"true"}, Env: map[string]action.EnvValue{"SECRET": {Value: "x"}}}
	}
	n, _ := singletonNode(t, f, "tok")
	for _, path := range []string{"/v1/singletons/state", "/v1/singletons/heartbeat"} {
		if res := n.do("GET", path, ""); res.status != 401 || strings.Contains(string(res.body), "SECRET") {
			t.Errorf("GET %s without the token: %d %s", path, res.status, res.body)
		}
		if res := n.do("GET", path, "", "Authorization", "Bearer tok"); res.status != 200 {
			t.Errorf("GET %s with the token: %d %s", path, res.status, res.body)
		}
	}
}

// readSpy is a request body that records whether anyone read it.
type readSpy struct {
	io.Reader
	read *atomic.Bool
}

func (r readSpy) Read(p []byte) (int, error) {
	r.read.Store(true)
	return r.Reader.Read(p)
}

// A singleton process's calls are no oracle (issue 30, item 17): the
// secret is checked first, and every caller without it gets one answer —
// same status, same body — whether the singleton exists, runs here, or the
// epoch is wrong; its body is not even read. Only the run's own secret
// learns that its epoch is stale (409).
func TestProcessCallsNoOracle(t *testing.T) {
	f := &fakeSingletons{all: map[string]httpapi.Singleton{fakeRun: {Name: fakeRun}, "other": {Name: "other"}}}
	_, h := singletonNode(t, f, "api-token")
	call := func(method, name, epoch, auth string) (int, string, bool) {
		var read atomic.Bool
		path := "/v1/singletons/" + name + "/state"
		if method == "POST" {
			path = "/v1/singletons/" + name + "/heartbeat"
		}
		req := httptest.NewRequest(method, path, readSpy{strings.NewReader(`{"n":1}`), &read})
		req.Host = "127.0.0.1"
		req.Header.Set("Content-Type", "application/json")
		if epoch != "" {
			req.Header.Set("Sqlease-Epoch", epoch)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String(), read.Load()
	}
	for _, method := range []string{"PUT", "POST"} {
		var first string
		for _, tc := range []struct{ name, epoch, auth string }{
			{fakeRun, "3", "Bearer wrong"},   // runs here, right epoch
			{fakeRun, "2", "Bearer wrong"},   // runs here, stale epoch
			{"other", "3", "Bearer wrong"},   // exists, not here
			{"absent", "3", "Bearer wrong"},  // does not exist
			{"absent", "", "Bearer wrong"},   // no epoch
			{fakeRun, "3", ""},               // no secret
			{fakeRun, "x", "Basic czNjcmV0"}, // another scheme
		} {
			status, body, read := call(method, tc.name, tc.epoch, tc.auth)
			if status != 401 || read {
				t.Errorf("%s %+v: %d (body read: %v) %s", method, tc, status, read, body)
			}
			if first == "" {
				first = body
			} else if body != first {
				t.Errorf("%s %+v: answer %q differs from %q", method, tc, body, first)
			}
		}
		if status, body, _ := call(method, fakeRun, "2", "Bearer "+fakeSecret); status != 409 {
			t.Errorf("%s with the secret, stale epoch: %d %s", method, status, body)
		}
		if status, body, _ := call(method, fakeRun, "3", "Bearer "+fakeSecret); status != 204 {
			t.Errorf("%s with the secret: %d %s", method, status, body)
		}
	}
}

// PUT …/state refuses a state that is not UTF-8 or holds a NUL with a 400
// naming state (issue 30, item 20), not PostgreSQL's 503; oversized bodies
// are 413 (item 27).
func TestProcessStateRefusedBytes(t *testing.T) {
	f := &fakeSingletons{all: map[string]httpapi.Singleton{fakeRun: {Name: fakeRun}}}
	n, _ := singletonNode(t, f, "")
	auth := []string{"Sqlease-Epoch", "3", "Authorization", "Bearer " + fakeSecret}
	for _, body := range []string{"\"\xff\xfe\"", "{\"a\":\"x\x00\"}"} {
		p := n.do("PUT", "/v1/singletons/run/state", body, auth...).problem(t, 400)
		if !strings.HasPrefix(p.Detail, "state:") {
			t.Errorf("state %q: %s", body, p.Detail)
		}
	}
	p := n.do("PUT", "/v1/singletons/run/state", `"`+strings.Repeat("x", 65<<10)+`"`, auth...).problem(t, 413)
	if !strings.HasPrefix(p.Detail, "body: must be at most") {
		t.Errorf("large state: %s", p.Detail)
	}
	if f.saved.Load() != 0 {
		t.Fatalf("%d refused states were saved", f.saved.Load())
	}
}

// An oversized singleton definition is 413, not 400 (issue 30, item 27).
func TestSingletonBodyTooLarge(t *testing.T) {
	f := &fakeSingletons{all: map[string]httpapi.Singleton{}}
	n, _ := singletonNode(t, f, "")
	body := `{"name":"big","command":["true"],"env":{"X":"` + strings.Repeat("x", httpapi.MaxSingletonBytes) + `"}}`
	p := n.do("POST", "/v1/singletons", body).problem(t, 413)
	if p.Detail != fmt.Sprintf("body: must be at most %d bytes", httpapi.MaxSingletonBytes) {
		t.Fatalf("detail %q", p.Detail)
	}
}
