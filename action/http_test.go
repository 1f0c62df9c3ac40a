package action

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
)

type seenRequest struct {
	method, path, host, body string
	header                   http.Header
}

// recordingServer answers status to every request and records them.
func recordingServer(t *testing.T, status int, respBody string) (*httptest.Server, func() []seenRequest) {
	t.Helper()
	var mu sync.Mutex
	var seen []seenRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, seenRequest{r.Method, r.URL.RequestURI(), r.Host, string(b), r.Header.Clone()})
		mu.Unlock()
		w.WriteHeader(status)
		_, _ = io.WriteString(w, respBody)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []seenRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]seenRequest(nil), seen...)
	}
}

func TestHTTPSendsRunIdentity(t *testing.T) {
	srv, seen := recordingServer(t, http.StatusOK, "ok")
	// The run's identity headers cannot be overridden.
	s, err := Parse([]byte(`{"http": {"url": "` + srv.URL + `/hook?x=1", "method": "POST", "body": "{\"report\":\"daily\"}",
		"headers": {"X-Team": "billing", "Content-Type": "application/json",
			"Idempotency-Key": "forged", "sqlease-epoch": "999", "Sqlease-Holder": "mallory"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background(), testRun(t)); err != nil {
		t.Fatalf("Run = %v", err)
	}
	reqs := seen()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.method != "POST" || r.path != "/hook?x=1" || r.body != `{"report":"daily"}` {
		t.Errorf("got %s %s %q", r.method, r.path, r.body)
	}
	for name, want := range testRunValues {
		if got := r.header.Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("header %s = %q, want exactly %q", name, got, want)
		}
	}
	for name, want := range map[string]string{"X-Team": "billing", "Content-Type": "application/json", "User-Agent": "sqlease"} {
		if got := r.header.Get(name); got != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
}

func TestHTTPDefaultsAndHost(t *testing.T) {
	srv, seen := recordingServer(t, http.StatusNoContent, "")
	s, err := Parse([]byte(`{"http": {"url": "` + srv.URL + `/x", "headers": {"Host": "hooks.example", "User-Agent": "mine/1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background(), testRun(t)); err != nil {
		t.Fatalf("Run = %v", err)
	}
	r := seen()[0]
	if r.method != "POST" || r.host != "hooks.example" || r.header.Get("User-Agent") != "mine/1" || r.header.Get("Content-Type") != "" || r.body != "" {
		t.Errorf("got %s host %q UA %q CT %q body %q", r.method, r.host, r.header.Get("User-Agent"), r.header.Get("Content-Type"), r.body)
	}

	s.HTTP.Method = "GET"
	if err := s.Run(context.Background(), testRun(t)); err != nil {
		t.Fatalf("GET: Run = %v", err)
	}
	if r := seen()[1]; r.method != "GET" {
		t.Errorf("method %s, want GET", r.method)
	}
}

func TestHTTPSuccessIs2xx(t *testing.T) {
	for _, status := range []int{200, 201, 202, 204, 299} {
		srv, _ := recordingServer(t, status, "")
		if err := (Spec{HTTP: &HTTP{URL: srv.URL}}).Run(context.Background(), testRun(t)); err != nil {
			t.Errorf("status %d: Run = %v, want success", status, err)
		}
	}
}

func TestHTTPFailureStatus(t *testing.T) {
	body := strings.Repeat("x", 600) + "END"
	srv, _ := recordingServer(t, http.StatusInternalServerError, "upstream broke: "+body)
	err := (Spec{HTTP: &HTTP{URL: srv.URL}}).Run(context.Background(), testRun(t))
	if err == nil {
		t.Fatal("Run = nil, want an error")
	}
	msg := err.Error()
	if !strings.Contains(msg, "status 500 Internal Server Error: upstream broke: xxx") {
		t.Errorf("error %q lacks status and body", msg)
	}
	if strings.Contains(msg, "END") || !strings.HasSuffix(msg, "…") {
		t.Errorf("error %q: body not truncated", msg)
	}
	if _, after, _ := strings.Cut(msg, "Internal Server Error: "); len(strings.TrimSuffix(after, "…")) > MaxErrorOutput {
		t.Errorf("error carries %d bytes of body, want at most %d", len(after), MaxErrorOutput)
	}
	if errors.Is(err, ErrTimeout) {
		t.Error("a 500 is not a timeout")
	}

	srv, _ = recordingServer(t, http.StatusNotFound, "")
	err = (Spec{HTTP: &HTTP{URL: srv.URL}}).Run(context.Background(), testRun(t))
	if err == nil || !strings.HasSuffix(err.Error(), "status 404 Not Found") {
		t.Errorf("Run = %v, want status 404 Not Found", err)
	}
}

func TestHTTPDoesNotFollowRedirects(t *testing.T) {
	target, seen := recordingServer(t, http.StatusOK, "")
	srv := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusFound))
	defer srv.Close()
	err := (Spec{HTTP: &HTTP{URL: srv.URL}}).Run(context.Background(), testRun(t))
	if err == nil || !strings.Contains(err.Error(), "status 302") {
		t.Errorf("Run = %v, want status 302", err)
	}
	if n := len(seen()); n != 0 {
		t.Errorf("redirect followed: %d requests to the target", n)
	}
}

// hangingServer never answers until the request is abandoned.
func hangingServer(t *testing.T) (*httptest.Server, <-chan struct{}) {
	t.Helper()
	arrived := make(chan struct{}, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return srv, arrived
}

func TestHTTPTimeout(t *testing.T) {
	srv, _ := hangingServer(t)
	start := time.Now()
	err := (Spec{HTTP: &HTTP{URL: srv.URL, Timeout: Duration(100 * time.Millisecond)}}).Run(context.Background(), testRun(t))
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Run = %v, want ErrTimeout", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("timeout of 100ms took %s", took)
	}
	if !strings.Contains(err.Error(), "100ms") {
		t.Errorf("error %q does not say the timeout", err)
	}
}

func TestHTTPCancelIsNotTimeout(t *testing.T) {
	srv, arrived := hangingServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	err := (Spec{HTTP: &HTTP{URL: srv.URL, Timeout: Duration(time.Minute)}}).Run(ctx, testRun(t))
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Errorf("Run = %v, want context.Canceled and not ErrTimeout", err)
	}

	// The caller's own deadline is not the action's timeout either.
	ctx, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	err = (Spec{HTTP: &HTTP{URL: srv.URL, Timeout: Duration(time.Minute)}}).Run(ctx, testRun(t))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrTimeout) {
		t.Errorf("Run = %v, want context.DeadlineExceeded and not ErrTimeout", err)
	}
}

func TestHTTPConnectionErrorHidesURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	err = (Spec{HTTP: &HTTP{URL: "http://user:hunter2@" + addr + "/hook?token=s3cret"}}).Run(context.Background(), testRun(t))
	if err == nil || errors.Is(err, ErrTimeout) {
		t.Fatalf("Run = %v, want a connection error", err)
	}
	if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %q leaks the URL's secrets", err)
	}
}

// A run that may no longer act (its context is cancelled: lease or lock
// lost) sends nothing, and an exec action starts nothing.
func TestNothingSentWhenTheRunMayNoLongerAct(t *testing.T) {
	srv, seen := recordingServer(t, http.StatusOK, "ok")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s, err := Parse([]byte(`{"http": {"url": "` + srv.URL + `/hook"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx, testRun(t)); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("Run = %v, want ErrLeaseLost", err)
	}
	if n := len(seen()); n != 0 {
		t.Fatalf("%d requests sent by a run that lost its lease", n)
	}
	marker := t.TempDir() + "/ran"
	e, err := Parse([]byte(`{"exec": {"command": ["touch", "` + marker + `"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Run(ctx, testRun(t)); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("exec Run = %v, want ErrLeaseLost", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran for a run that lost its lease")
	}
}

// TestRunValuesCanonical: the run's values are set straight into the
// request's header map, so their names must be canonical (as Header.Set
// would write them), or they would be sent twice or in another case.
func TestRunValuesCanonical(t *testing.T) {
	run := testRun(t)
	run.Checkpoint = []byte(`{"n":1}`)
	ctx := WithRunAccess(context.Background(), RunAccess{API: "http://127.0.0.1:1", Token: "t0k3n-t0k3n"})
	values := append(runValues(run), callbackValues(ctx, run)...)
	values = append(values, runValue{header: "Sqlease-Checkpoint-Size"}, runValue{header: "User-Agent"})
	for _, v := range values {
		if c := http.CanonicalHeaderKey(v.header); c != v.header {
			t.Errorf("header %q is not canonical (%q)", v.header, c)
		}
	}
	if len(values) != 11 {
		t.Errorf("%d values, want the 9 of API.md and the two set by name", len(values))
	}
}

// TestHTTPPreparedActionSharedByRuns: the runs of one action share what
// Handle prepared once (its parsed URL, its headers, its body's source),
// and each still sends the whole request with its own identity —
// concurrently, under -race — and no Accept-Encoding the action did not
// set (the transport asks for no compression of its own).
func TestHTTPPreparedActionSharedByRuns(t *testing.T) {
	srv, seen := recordingServer(t, http.StatusNoContent, "")
	raw := []byte(`{"http": {"url": "` + srv.URL + `/prepared?q=1", "method": "put", "body": "the body",
		"headers": {"x-team": "billing", "Host": "hooks.example", "sqlease-job": "forged"}}}`)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := testRun(t)
			run.Job = fmt.Sprintf("job-%d", i)
			run.Action = raw
			errs <- Handle(context.Background(), run)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Handle = %v", err)
		}
	}
	reqs := seen()
	if len(reqs) != n {
		t.Fatalf("%d requests, want %d", len(reqs), n)
	}
	jobs := map[string]bool{}
	for _, r := range reqs {
		if r.method != "PUT" || r.path != "/prepared?q=1" || r.host != "hooks.example" || r.body != "the body" || r.header.Get("X-Team") != "billing" {
			t.Errorf("got %s %s host %q body %q X-Team %q", r.method, r.path, r.host, r.body, r.header.Get("X-Team"))
		}
		if v, ok := r.header["Accept-Encoding"]; ok {
			t.Errorf("Accept-Encoding %q sent; the action set none", v)
		}
		if got := r.header.Values("Sqlease-Job"); len(got) != 1 {
			t.Errorf("Sqlease-Job %q, want one value", got)
		} else {
			jobs[got[0]] = true
		}
	}
	if len(jobs) != n {
		t.Errorf("%d distinct Sqlease-Job values, want %d: %v", len(jobs), n, jobs)
	}
}
