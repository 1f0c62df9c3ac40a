package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/goleak"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/action"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/internal/syncbuf"
	"github.com/sqlease/sqlease/prom"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlite"
	"github.com/sqlease/sqlease/sqlstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// offsetClock is the system clock shifted by an adjustable offset (it keeps
// the monotonic reading).
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// node is one sqlease node under test: a real SQLite store, elector,
// scheduler and the API on an httptest server.
type node struct {
	t        *testing.T
	store    *sqlstore.Store
	el       *election.Elector
	sched    *scheduler.Scheduler
	srv      *httptest.Server
	stopping atomic.Bool
	logs     *syncbuf.Buffer
	reg      *prometheus.Registry

	mu      sync.Mutex
	handled []sqlease.Run
}

type nodeOpts struct {
	holder     string
	noElector  bool // do not run the elector
	claim      bool // run claim-mode dispatch
	handler    scheduler.Handler
	clock      sqlease.Clock
	leaseDur   time.Duration
	renewEvery time.Duration
	configure  func(*httpapi.Config)
	closeStore bool // the test closes the store itself
}

func newNode(t *testing.T, dbPath string, o nodeOpts) *node {
	t.Helper()
	ctx := context.Background()
	if o.holder == "" {
		o.holder = "node-a"
	}
	if o.leaseDur == 0 {
		o.leaseDur = 2 * time.Second
	}
	if o.renewEvery == 0 {
		o.renewEvery = 200 * time.Millisecond
	}
	store, err := sqlite.OpenStore(ctx, dbPath, "sqlease")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, store: store, logs: &syncbuf.Buffer{}, reg: prometheus.NewRegistry()}
	log := slog.New(slog.NewTextHandler(n.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	obs := prom.New(n.reg, "lead")
	handler := o.handler
	if handler == nil {
		handler = func(ctx context.Context, r sqlease.Run) error {
			n.mu.Lock()
			n.handled = append(n.handled, r)
			n.mu.Unlock()
			return nil
		}
	}
	n.sched, err = scheduler.New(scheduler.Config{
		Store: store, Holder: o.holder, Handler: handler, ValidateAction: action.ValidateJSON,
		PollInterval: 20 * time.Millisecond, Observer: obs,
	})
	if err != nil {
		t.Fatal(err)
	}
	n.el, err = election.New(election.Config{
		Store: store, LeaseName: "lead", HolderID: o.holder,
		LeaseDuration: o.leaseDur, RenewInterval: o.renewEvery, AcquireInterval: 50 * time.Millisecond,
		Clock: o.clock, Observer: obs,
	})
	if err != nil {
		t.Fatal(err)
	}
	obs.WatchElector(n.el.Status)
	cfg := httpapi.Config{
		Scheduler: n.sched, Leases: store, Elector: n.el,
		Metrics:  promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{}),
		Stopping: n.stopping.Load, Logger: log,
		ListenAddr: "127.0.0.1:0", Exec: action.AllowExec(),
	}
	if o.configure != nil {
		o.configure(&cfg)
	}
	n.srv = httptest.NewServer(httpapi.New(cfg))

	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if !o.noElector {
		wg.Add(1)
		go func() { defer wg.Done(); _ = n.el.Run(runCtx) }()
	}
	if o.claim {
		wg.Add(1)
		go func() { defer wg.Done(); _ = n.sched.Run(runCtx) }()
	}
	t.Cleanup(func() {
		n.srv.Close()
		cancel()
		wg.Wait()
		if !o.closeStore {
			store.DB().Close()
		}
	})
	return n
}

func (n *node) waitLeader() {
	n.t.Helper()
	dbtest.WaitFor(n.t, 5*time.Second, "leadership", n.el.IsLeader)
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// problem decodes a problem response and checks its content type.
func (r response) problem(t *testing.T, status int) httpapi.Problem {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q, want application/problem+json", ct)
	}
	var p httpapi.Problem
	r.json(t, &p)
	if p.Status != status || p.Title != http.StatusText(status) || p.Type != "about:blank" || p.Detail == "" {
		t.Fatalf("problem %+v for status %d", p, status)
	}
	return p
}

// do sends a request; hdr is pairs of header name and value.
func (n *node) do(method, path, body string, hdr ...string) response {
	n.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, n.srv.URL+path, rd)
	if err != nil {
		n.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json") // unless hdr says otherwise
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := n.srv.Client().Do(req)
	if err != nil {
		n.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		n.t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

// get is the answer to GET path decoded as a T; any status but 200 fails
// the test.
func get[T any](t *testing.T, n *node, path string) (T, response) {
	t.Helper()
	var v T
	res := n.do("GET", path, "")
	if res.status != 200 {
		t.Fatalf("GET %s: %d %s", path, res.status, res.body)
	}
	res.json(t, &v)
	return v, res
}

func (n *node) jobNames() []string {
	n.t.Helper()
	l, _ := get[httpapi.JobList](n.t, n, "/v1/jobs")
	var names []string
	for _, j := range l.Jobs {
		names = append(names, j.Name)
	}
	return names
}

// readyFields parses a /readyz body.
func readyFields(t *testing.T, body []byte) map[string]string {
	t.Helper()
	s := string(body)
	t.Logf("readyz: %s", strings.TrimSpace(s))
	if !strings.HasSuffix(s, "\n") || strings.Count(s, "\n") != 1 {
		t.Fatalf("readyz body %q is not one line", s)
	}
	out := map[string]string{}
	for _, kv := range strings.Fields(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("readyz body %q: %q is not key=value", s, kv)
		}
		out[k] = v
	}
	return out
}

func dbPath(t *testing.T) string { return filepath.Join(t.TempDir(), "sqlease.db") }

const httpAction = `{"http": {"url": "http://127.0.0.1:9/hook", "method": "POST", "headers": {"X-Team": "billing"}, "body": "{}", "timeout": "30s"}}`

func TestHealthzAndReadyzLeaderFollowerStopping(t *testing.T) {
	path := dbPath(t)
	a := newNode(t, path, nodeOpts{holder: "node-a"})
	a.waitLeader()
	b := newNode(t, path, nodeOpts{holder: "node-b"})
	dbtest.WaitFor(t, 5*time.Second, "follower to observe the lease", func() bool { return b.el.Status().LeaderKnown })

	for _, n := range []*node{a, b} {
		res := n.do("GET", "/healthz", "")
		if res.status != 200 || string(res.body) != "ok\n" {
			t.Errorf("healthz: %d %q", res.status, res.body)
		}
	}

	res := a.do("GET", "/readyz", "")
	if res.status != 200 || !strings.HasPrefix(res.header.Get("Content-Type"), "text/plain") {
		t.Fatalf("leader readyz: %d %s %q", res.status, res.header.Get("Content-Type"), res.body)
	}
	if !strings.HasPrefix(string(res.body), "mode=leader holder_id=node-a ") {
		t.Errorf("leader readyz body %q", res.body)
	}
	f := readyFields(t, res.body)
	if f["leader"] != "node-a" || f["lease_epoch"] != "1" {
		t.Errorf("leader readyz fields %v", f)
	}
	exp, err := time.Parse(time.RFC3339, f["lease_expires_at"])
	if err != nil || !strings.HasSuffix(f["lease_expires_at"], "Z") {
		t.Errorf("lease_expires_at %q: not RFC 3339 UTC: %v", f["lease_expires_at"], err)
	} else if d := time.Until(exp); d < -time.Second || d > 5*time.Second {
		t.Errorf("lease_expires_at %s is %s from now", exp, d)
	}

	res = b.do("GET", "/readyz", "")
	if res.status != 200 || !strings.HasPrefix(string(res.body), "mode=follower holder_id=node-b ") {
		t.Fatalf("follower readyz: %d %q", res.status, res.body)
	}
	f = readyFields(t, res.body)
	if f["leader"] != "node-a" || f["lease_epoch"] != "1" || f["lease_expires_at"] == "" {
		t.Errorf("follower readyz fields %v", f)
	}

	b.stopping.Store(true)
	res = b.do("GET", "/readyz", "")
	if res.status != 503 || !strings.HasPrefix(string(res.body), "mode=stopping holder_id=node-b ") {
		t.Errorf("stopping readyz: %d %q", res.status, res.body)
	}
	if res := b.do("GET", "/healthz", ""); res.status != 200 {
		t.Errorf("healthz while stopping: %d", res.status)
	}
}

func TestReadyzStartingAndDatabaseUnreachable(t *testing.T) {
	// Never contacted (the database is gone before the first call, so the
	// probe of /readyz fails too): starting, then unreachable once the
	// bound passes.
	n := newNode(t, dbPath(t), nodeOpts{noElector: true, closeStore: true, configure: func(c *httpapi.Config) { c.DBUnreachableAfter = 150 * time.Millisecond }})
	n.store.DB().Close()
	res := n.do("GET", "/readyz", "")
	f := readyFields(t, res.body)
	if res.status != 503 || f["mode"] != "unavailable" || f["reason"] != "starting" || f["lease_epoch"] != "0" {
		t.Errorf("before first contact: %d %q", res.status, res.body)
	}
	time.Sleep(200 * time.Millisecond)
	res = n.do("GET", "/readyz", "")
	f = readyFields(t, res.body)
	if res.status != 503 || f["reason"] != "db_unreachable" || f["db_last_contact_age"] != "never" {
		t.Errorf("never contacted past the bound: %d %q", res.status, res.body)
	}

	// Contact, then the database goes away.
	m := newNode(t, dbPath(t), nodeOpts{closeStore: true, configure: func(c *httpapi.Config) { c.DBUnreachableAfter = 300 * time.Millisecond }})
	m.waitLeader()
	if res := m.do("GET", "/readyz", ""); res.status != 200 {
		t.Fatalf("leader readyz: %d %q", res.status, res.body)
	}
	m.store.DB().Close()
	dbtest.WaitFor(t, 5*time.Second, "readyz 503 after the database closed", func() bool {
		res := m.do("GET", "/readyz", "")
		f := readyFields(t, res.body)
		return res.status == 503 && f["mode"] == "unavailable" && f["reason"] == "db_unreachable" && f["db_last_contact_age"] != ""
	})
	// Reads that need the database answer 503 or 500, as problems.
	res = m.do("GET", "/v1/jobs", "")
	if res.status < 500 || res.header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("list with the database closed: %d %q", res.status, res.body)
	}
}

func TestHealthzFailsWhenLeaderMissedRenewDeadline(t *testing.T) {
	clock := &offsetClock{}
	// A long renew interval: the elector will not notice the jump itself
	// during the test, as a leader stuck in a stalled renew would not.
	n := newNode(t, dbPath(t), nodeOpts{clock: clock, leaseDur: time.Hour, renewEvery: 30 * time.Minute})
	n.waitLeader()
	if res := n.do("GET", "/healthz", ""); res.status != 200 {
		t.Fatalf("healthz: %d %q", res.status, res.body)
	}
	clock.Advance(2 * time.Hour)
	res := n.do("GET", "/healthz", "")
	if res.status != 503 || !strings.Contains(string(res.body), "missed its renew deadline") {
		t.Errorf("healthz after the deadline: %d %q", res.status, res.body)
	}
	res = n.do("GET", "/readyz", "")
	f := readyFields(t, res.body)
	if res.status != 503 || f["reason"] != "renew_deadline_missed" {
		t.Errorf("readyz after the deadline: %d %q", res.status, res.body)
	}
}

func TestJobLifecycle(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{})
	body := `{"name": "nightly-report", "schedule": {"every": "10m"}, "action": ` + httpAction + `,
		"missed_runs": "run_all", "skip_if_older_than": "1h", "retry": {"max_attempts": 5, "backoff": "2s"}, "lock_timeout": "90s"}`
	before := time.Now()
	res := n.do("POST", "/v1/jobs", body)
	if res.status != 201 {
		t.Fatalf("create: %d %s", res.status, res.body)
	}
	if loc := res.header.Get("Location"); loc != "/v1/jobs/nightly-report" {
		t.Errorf("Location %q", loc)
	}
	if ct := res.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type %q", ct)
	}
	var raw map[string]any
	res.json(t, &raw)
	for _, k := range []string{"name", "schedule", "action", "missed_runs", "skip_if_older_than", "retry", "lock_timeout", "state", "next_run_at", "attempt_count", "created_at", "last_modified_at"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("created job lacks %q: %s", k, res.body)
		}
	}
	for _, k := range []string{"key", "last_run_at", "locked_by"} {
		if _, ok := raw[k]; ok {
			t.Errorf("created job has empty %q: %s", k, res.body)
		}
	}
	var j httpapi.Job
	res.json(t, &j)
	if j.Name != "nightly-report" || j.Schedule != (httpapi.ScheduleJSON{Every: "10m0s"}) || j.MissedRuns != "run_all" ||
		j.SkipIfOlderThan != "1h0m0s" || j.Retry != (httpapi.RetryJSON{MaxAttempts: 5, Backoff: "2s"}) || j.LockTimeout != "1m30s" ||
		j.State != "active" || j.AttemptCount != 0 {
		t.Errorf("created job %+v", j)
	}
	var act map[string]map[string]any
	if err := json.Unmarshal(j.Action, &act); err != nil || act["http"]["url"] != "http://127.0.0.1:9/hook" || act["http"]["timeout"] != "30s" {
		t.Errorf("action %s (%v)", j.Action, err)
	}
	for name, ts := range map[string]string{"next_run_at": j.NextRunAt, "created_at": j.CreatedAt, "last_modified_at": j.LastModifiedAt} {
		tm, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || !strings.HasSuffix(ts, "Z") {
			t.Errorf("%s %q is not RFC 3339 UTC: %v", name, ts, err)
		} else if tm.Before(before.Add(-5*time.Second)) || tm.After(time.Now().Add(5*time.Second)) {
			t.Errorf("%s %s is not about now", name, tm)
		}
	}

	res = n.do("GET", "/v1/jobs/nightly-report", "")
	var got httpapi.Job
	res.json(t, &got)
	if res.status != 200 || got.Name != j.Name || got.NextRunAt != j.NextRunAt || string(got.Action) != string(j.Action) {
		t.Errorf("get: %d %s", res.status, res.body)
	}

	res = n.do("POST", "/v1/jobs/nightly-report/pause", "")
	res.json(t, &got)
	if res.status != 200 || got.State != "paused" {
		t.Errorf("pause: %d %s", res.status, res.body)
	}
	res = n.do("POST", "/v1/jobs/nightly-report/resume", "")
	res.json(t, &got)
	if res.status != 200 || got.State != "active" {
		t.Errorf("resume: %d %s", res.status, res.body)
	}
	res = n.do("POST", "/v1/jobs/nightly-report/trigger", "")
	res.json(t, &got)
	if res.status != 200 || got.NextRunAt == "" {
		t.Errorf("trigger: %d %s", res.status, res.body)
	} else if next, _ := time.Parse(time.RFC3339Nano, got.NextRunAt); next.After(time.Now().Add(5 * time.Second)) {
		t.Errorf("trigger: next_run_at %s is not now", next)
	}

	res = n.do("DELETE", "/v1/jobs/nightly-report", "")
	if res.status != 204 || len(res.body) != 0 {
		t.Errorf("delete: %d %q", res.status, res.body)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/jobs/nightly-report"}, {"DELETE", "/v1/jobs/nightly-report"},
		{"POST", "/v1/jobs/nightly-report/pause"}, {"POST", "/v1/jobs/nightly-report/resume"},
		{"POST", "/v1/jobs/nightly-report/trigger"}, {"GET", "/v1/jobs/never-was/runs"},
	} {
		p := n.do(c.method, c.path, "").problem(t, 404)
		if !strings.Contains(p.Detail, "name") {
			t.Errorf("%s %s: detail %q does not name the field", c.method, c.path, p.Detail)
		}
	}
	if names := n.jobNames(); len(names) != 0 {
		t.Errorf("jobs after delete: %v", names)
	}
}

func TestCreateDefaultsAndSchedules(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{})
	cases := []struct {
		body string
		want httpapi.ScheduleJSON
	}{
		{`{"name": "once", "schedule": {}, "action": ` + httpAction + `}`, httpapi.ScheduleJSON{}},
		{`{"name": "no-schedule", "action": ` + httpAction + `}`, httpapi.ScheduleJSON{}},
		{`{"name": "cron", "schedule": {"cron": "0 3 * * *", "timezone": "Europe/Paris"}, "action": {"exec": {"command": ["/bin/true"]}}}`,
			httpapi.ScheduleJSON{Cron: "0 3 * * *", Timezone: "Europe/Paris"}},
		{`{"name": "at", "schedule": {"at": "2030-01-02T15:04:05+02:00"}, "action": ` + httpAction + `, "paused": true}`,
			httpapi.ScheduleJSON{At: "2030-01-02T13:04:05Z"}},
	}
	for _, c := range cases {
		res := n.do("POST", "/v1/jobs", c.body)
		var j httpapi.Job
		res.json(t, &j)
		if res.status != 201 || j.Schedule != c.want {
			t.Errorf("%s: %d %s", c.body, res.status, res.body)
		}
		if j.MissedRuns != "run_once" || j.Retry.MaxAttempts != scheduler.DefaultMaxAttempts || j.LockTimeout != "2m0s" {
			t.Errorf("%s: defaults not applied: %s", c.body, res.body)
		}
	}
	// JobRequest, marshalled, is a valid body (clients may use it).
	var req bytes.Buffer
	enc := json.NewEncoder(&req)
	enc.SetEscapeHTML(false)
	err := enc.Encode(httpapi.JobRequest{
		Name: "typed", Key: "k", Schedule: httpapi.ScheduleJSON{Every: "90s"},
		Action:     json.RawMessage(`{"http": {"url": "http://127.0.0.1:9/a?x=1&y=2"}}`),
		MissedRuns: "skip", SkipIfOlderThan: "5m", Retry: httpapi.RetryJSON{MaxAttempts: 2, Backoff: "3s"}, LockTimeout: "10m",
	})
	if err != nil {
		t.Fatal(err)
	}
	res := n.do("POST", "/v1/jobs", req.String())
	var typed httpapi.Job
	res.json(t, &typed)
	if res.status != 201 || typed.Schedule.Every != "1m30s" || typed.MissedRuns != "skip" || typed.SkipIfOlderThan != "5m0s" ||
		typed.Retry != (httpapi.RetryJSON{MaxAttempts: 2, Backoff: "3s"}) || typed.LockTimeout != "10m0s" || typed.Key != "k" {
		t.Errorf("typed request: %d %s", res.status, res.body)
	}
	if !strings.Contains(string(res.body), "x=1&y=2") {
		t.Errorf("action URL HTML-escaped: %s", res.body)
	}

	res = n.do("GET", "/v1/jobs/at", "")
	var j httpapi.Job
	res.json(t, &j)
	if j.State != "paused" || j.NextRunAt != "2030-01-02T13:04:05Z" {
		t.Errorf("at job: %s", res.body)
	}
}

func TestCreateIdempotent(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{})
	body := `{"name": "report", "schedule": {"every": "1h"}, "action": ` + httpAction + `}`

	// By the Idempotency-Key header.
	first := n.do("POST", "/v1/jobs", body, "Idempotency-Key", "req-1")
	if first.status != 201 {
		t.Fatalf("first create: %d %s", first.status, first.body)
	}
	var j1 httpapi.Job
	first.json(t, &j1)
	if j1.Key != "req-1" {
		t.Errorf("key from header: %q", j1.Key)
	}
	again := n.do("POST", "/v1/jobs", body, "Idempotency-Key", "req-1")
	if again.status != 200 || again.header.Get("Location") != "/v1/jobs/report" {
		t.Fatalf("repeat create: %d %s", again.status, again.body)
	}
	var j2 httpapi.Job
	again.json(t, &j2)
	if j2.CreatedAt != j1.CreatedAt || j2.NextRunAt != j1.NextRunAt {
		t.Errorf("repeat returned a different job: %s vs %s", again.body, first.body)
	}
	// The same key in the body is the same request.
	keyed := `{"name": "report", "key": "req-1", "schedule": {"every": "1h"}, "action": ` + httpAction + `}`
	if res := n.do("POST", "/v1/jobs", keyed); res.status != 200 {
		t.Errorf("repeat with the key in the body: %d %s", res.status, res.body)
	}
	if res := n.do("POST", "/v1/jobs", keyed, "Idempotency-Key", "req-1"); res.status != 200 {
		t.Errorf("repeat with both keys equal: %d %s", res.status, res.body)
	}
	p := n.do("POST", "/v1/jobs", keyed, "Idempotency-Key", "req-2").problem(t, 400)
	if !strings.Contains(p.Detail, "key") || !strings.Contains(p.Detail, "Idempotency-Key") {
		t.Errorf("differing keys: detail %q", p.Detail)
	}

	// By the body key alone.
	other := `{"name": "other", "key": "k-other", "schedule": {"every": "1h"}, "action": ` + httpAction + `}`
	if res := n.do("POST", "/v1/jobs", other); res.status != 201 {
		t.Fatalf("create other: %d %s", res.status, res.body)
	}
	if res := n.do("POST", "/v1/jobs", other); res.status != 200 {
		t.Errorf("repeat other: %d %s", res.status, res.body)
	}

	// Without any key, the same name with the same content is a repeat.
	plain := `{"name": "plain", "schedule": {"every": "1h"}, "action": ` + httpAction + `}`
	if res := n.do("POST", "/v1/jobs", plain); res.status != 201 {
		t.Fatalf("create plain: %d %s", res.status, res.body)
	}
	if res := n.do("POST", "/v1/jobs", plain); res.status != 200 {
		t.Errorf("repeat plain: %d %s", res.status, res.body)
	}

	// Clashes: the same name with different content, the same key for
	// another name.
	p = n.do("POST", "/v1/jobs", `{"name": "plain", "schedule": {"every": "2h"}, "action": `+httpAction+`}`).problem(t, 409)
	if !strings.HasPrefix(p.Detail, "name: ") || !strings.Contains(p.Detail, "plain") {
		t.Errorf("name clash detail %q", p.Detail)
	}
	p = n.do("POST", "/v1/jobs", `{"name": "renamed", "schedule": {"every": "1h"}, "action": `+httpAction+`}`, "Idempotency-Key", "req-1").problem(t, 409)
	if !strings.HasPrefix(p.Detail, "key: ") {
		t.Errorf("key clash detail %q", p.Detail)
	}

	if got := n.jobNames(); strings.Join(got, ",") != "other,plain,report" {
		t.Errorf("jobs %v", got)
	}
}

// A create racing a delete of the same name (issue 30, item 26): the
// insert finds the name taken, the row it then reads to compare contents
// is gone, and Create returns ErrNoJob — which POST /v1/jobs answered as
// 404 `no job named ""` (the route has no {name}). Now such a create is
// tried again, and what it answers names the job of the body.
func TestCreateRacingDelete(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{noElector: true})
	ctx, cancel := context.WithCancel(context.Background())
	other := sqlease.Job{Name: "x", Schedule: sqlease.Schedule{Every: time.Hour}, Action: []byte(`{"http":{"url":"http://127.0.0.1:8/"}}`)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // another client creates and deletes x, with other content
		defer wg.Done()
		for ctx.Err() == nil {
			_, _, _ = n.sched.Create(ctx, other)
			_ = n.sched.Delete(ctx, "x")
		}
	}()
	defer func() { cancel(); wg.Wait() }()
	body := `{"name":"x","schedule":{"every":"1h"},"action":{"http":{"url":"http://127.0.0.1:9/"}}}`
	statuses := map[int]int{}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		res := n.do("POST", "/v1/jobs", body)
		statuses[res.status]++
		switch res.status {
		case 200, 201:
		case 409:
			if p := res.problem(t, 409); !strings.Contains(p.Detail, `"x"`) {
				t.Fatalf("409 does not name the job: %s", p.Detail)
			}
		default:
			t.Fatalf("create racing a delete: %d %s (so far %v)", res.status, res.body, statuses)
		}
		if res.status == 201 {
			_ = n.sched.Delete(ctx, "x") // or the other client did

		}
	}
	t.Logf("answers: %v", statuses)
}

func TestCreateValidation(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{configure: func(c *httpapi.Config) { c.MaxBodyBytes = 4096 }})
	valid := func(mod string) string {
		return `{"name": "j", "schedule": {"every": "1m"}, "action": ` + httpAction + mod + `}`
	}
	cases := []struct {
		name, body, field string
		status            int
	}{
		{"bad name", `{"name": "Bad Name", "action": ` + httpAction + `}`, "name", 400},
		{"empty name", `{"action": ` + httpAction + `}`, "name", 400},
		{"name not a string", `{"name": 5, "action": ` + httpAction + `}`, "name", 400},
		{"every not a duration", `{"name": "j", "schedule": {"every": "fast"}, "action": ` + httpAction + `}`, "schedule.every", 400},
		{"every a number", `{"name": "j", "schedule": {"every": 600}, "action": ` + httpAction + `}`, "schedule.every", 400},
		{"every zero", `{"name": "j", "schedule": {"every": "0s"}, "action": ` + httpAction + `}`, "schedule.every", 400},
		{"every too short", `{"name": "j", "schedule": {"every": "1ms"}, "action": ` + httpAction + `}`, "schedule.every", 400},
		{"bad cron", `{"name": "j", "schedule": {"cron": "every day"}, "action": ` + httpAction + `}`, "schedule.cron", 400},
		{"bad timezone", `{"name": "j", "schedule": {"cron": "0 3 * * *", "timezone": "Mars/Olympus"}, "action": ` + httpAction + `}`, "schedule.timezone", 400},
		{"timezone without cron", `{"name": "j", "schedule": {"every": "1m", "timezone": "UTC"}, "action": ` + httpAction + `}`, "schedule.timezone", 400},
		{"two schedules", `{"name": "j", "schedule": {"every": "1m", "cron": "0 3 * * *"}, "action": ` + httpAction + `}`, "schedule.cron", 400},
		{"bad at", `{"name": "j", "schedule": {"at": "tomorrow"}, "action": ` + httpAction + `}`, "schedule.at", 400},
		{"schedule a string", `{"name": "j", "schedule": "daily", "action": ` + httpAction + `}`, "schedule", 400},
		{"bad missed_runs", valid(`, "missed_runs": "sometimes"`), "missed_runs", 400},
		{"negative skip", valid(`, "skip_if_older_than": "-1s"`), "skip_if_older_than", 400},
		{"bad skip", valid(`, "skip_if_older_than": "old"`), "skip_if_older_than", 400},
		{"bad max_attempts", valid(`, "retry": {"max_attempts": 1000}`), "retry.max_attempts", 400},
		{"max_attempts a string", valid(`, "retry": {"max_attempts": "3"}`), "retry.max_attempts", 400},
		{"bad backoff", valid(`, "retry": {"backoff": "soon"}`), "retry.backoff", 400},
		{"unknown retry field", valid(`, "retry": {"tries": 3}`), "tries", 400},
		{"bad lock_timeout", valid(`, "lock_timeout": "1ms"`), "lock_timeout", 400},
		{"paused a string", valid(`, "paused": "yes"`), "paused", 400},
		{"long key", valid(`, "key": "` + strings.Repeat("k", 300) + `"`), "key", 400},
		{"no action", `{"name": "j"}`, "action", 400},
		{"empty action", `{"name": "j", "action": {}}`, "action", 400},
		{"bad url", `{"name": "j", "action": {"http": {"url": "ftp://x"}}}`, "action.http.url", 400},
		{"bad method", `{"name": "j", "action": {"http": {"url": "http://x", "method": "BREW"}}}`, "action.http.method", 400},
		{"bad action timeout", `{"name": "j", "action": {"http": {"url": "http://x", "timeout": "soon"}}}`, "action.http.timeout", 400},
		{"empty command", `{"name": "j", "action": {"exec": {"command": []}}}`, "action.exec.command", 400},
		{"unknown action field", `{"name": "j", "action": {"shell": "rm -rf /"}}`, "action", 400},
		{"unknown field", valid(`, "color": "blue"`), "color", 400},
		{"output field on input", valid(`, "state": "active"`), "state", 400},
		{"unknown schedule field", `{"name": "j", "schedule": {"every": "1m", "jitter": "1s"}, "action": ` + httpAction + `}`, "jitter", 400},
		{"bad JSON", `{"name": "j",`, "body", 400},
		{"syntax error", `{"name" "j"}`, "body", 400},
		{"not an object", `["j"]`, "body", 400},
		{"empty body", ``, "body", 400},
		{"trailing data", valid(``) + `{}`, "body", 400},
		{"too large", valid(`, "key": "` + strings.Repeat("k", 5000) + `"`), "body", 413},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := n.do("POST", "/v1/jobs", c.body).problem(t, c.status)
			t.Logf("detail: %s", p.Detail)
			if !strings.Contains(p.Detail, c.field) {
				t.Errorf("detail %q does not name %q", p.Detail, c.field)
			}
			if strings.Contains(p.Detail, "sqlease:") {
				t.Errorf("detail %q carries an internal error prefix", p.Detail)
			}
		})
	}
	if names := n.jobNames(); len(names) != 0 {
		t.Errorf("invalid requests wrote jobs: %v", names)
	}
	// Several errors at once are all reported.
	p := n.do("POST", "/v1/jobs", `{"name": "Bad", "schedule": {"cron": "nope"}, "missed_runs": "x", "action": {"http": {"url": ""}}}`).problem(t, 400)
	for _, f := range []string{"name", "schedule.cron", "missed_runs", "action.http.url"} {
		if !strings.Contains(p.Detail, f) {
			t.Errorf("joined detail %q does not name %s", p.Detail, f)
		}
	}
}

func TestListJobsPaging(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{})
	res := n.do("GET", "/v1/jobs", "")
	if res.status != 200 || strings.TrimSpace(string(res.body)) != `{"jobs":[]}` {
		t.Errorf("empty list: %d %s", res.status, res.body)
	}
	for _, name := range []string{"e", "a", "d", "b", "c"} {
		if res := n.do("POST", "/v1/jobs", `{"name": "`+name+`", "schedule": {"every": "1h"}, "action": `+httpAction+`}`); res.status != 201 {
			t.Fatalf("create %s: %d %s", name, res.status, res.body)
		}
	}
	var pages [][]string
	after := ""
	for range 10 {
		res := n.do("GET", "/v1/jobs?limit=2&after="+after, "")
		var l httpapi.JobList
		res.json(t, &l)
		var names []string
		for _, j := range l.Jobs {
			names = append(names, j.Name)
		}
		pages = append(pages, names)
		if l.Next == "" {
			if strings.Contains(string(res.body), `"next"`) {
				t.Errorf("last page carries next: %s", res.body)
			}
			break
		}
		after = l.Next
	}
	if got := strings.TrimSpace(strings.ReplaceAll(strings.Trim(strings.Join(flatten(pages), " "), " "), "  ", " ")); got != "a b c d e" || len(pages) != 3 {
		t.Errorf("pages %v", pages)
	}
	// A page that ends exactly at the last job has no next.
	res = n.do("GET", "/v1/jobs?limit=5", "")
	var l httpapi.JobList
	res.json(t, &l)
	if len(l.Jobs) != 5 || l.Next != "" {
		t.Errorf("limit=5: %s", res.body)
	}
	for _, bad := range []string{"0", "-1", "abc", "1001", "2.5"} {
		p := n.do("GET", "/v1/jobs?limit="+bad, "").problem(t, 400)
		if !strings.Contains(p.Detail, "limit") {
			t.Errorf("limit=%s: detail %q", bad, p.Detail)
		}
		n.do("GET", "/v1/jobs/a/runs?limit="+bad, "").problem(t, 400)
	}
	if res := n.do("GET", "/v1/jobs?limit=1000", ""); res.status != 200 {
		t.Errorf("limit=1000: %d", res.status)
	}
}

func flatten(pages [][]string) []string {
	var out []string
	for _, p := range pages {
		out = append(out, p...)
	}
	return out
}

func TestAuth(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{configure: func(c *httpapi.Config) { c.APIToken = "s3cret" }})
	body := `{"name": "guarded", "schedule": {"every": "1h"}, "action": ` + httpAction + `}`
	for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "s3cret"}, {"Authorization", "Basic czNjcmV0"}, {"Authorization", "Bearer s3cret-and-more"}} {
		res := n.do("POST", "/v1/jobs", body, hdr...)
		p := res.problem(t, 401)
		if !strings.Contains(p.Detail, "Authorization") || !strings.HasPrefix(res.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%v: detail %q, WWW-Authenticate %q", hdr, p.Detail, res.header.Get("WWW-Authenticate"))
		}
	}
	if res := n.do("GET", "/v1/jobs", "", "Authorization", "Bearer s3cret"); res.status != 200 || strings.Contains(string(res.body), "guarded") {
		t.Fatalf("unauthorized create wrote: %d %s", res.status, res.body)
	}
	if res := n.do("POST", "/v1/jobs", body, "Authorization", "Bearer s3cret"); res.status != 201 {
		t.Fatalf("authorized create: %d %s", res.status, res.body)
	}
	if res := n.do("POST", "/v1/jobs/guarded/pause", "", "Authorization", "bearer s3cret"); res.status != 200 {
		t.Errorf("lower-case scheme: %d %s", res.status, res.body)
	}
	for _, c := range []struct{ method, path string }{
		{"POST", "/v1/jobs/guarded/pause"}, {"POST", "/v1/jobs/guarded/resume"},
		{"POST", "/v1/jobs/guarded/trigger"}, {"DELETE", "/v1/jobs/guarded"},
	} {
		n.do(c.method, c.path, "").problem(t, 401)
	}
	// With a token, reads need it too (actions may hold secrets); the
	// probes and metrics stay open.
	for _, path := range []string{"/v1/jobs", "/v1/jobs/guarded", "/v1/jobs/guarded/runs", "/v1/leases"} {
		n.do("GET", path, "").problem(t, 401)
		if res := n.do("GET", path, "", "Authorization", "Bearer s3cret"); res.status != 200 {
			t.Errorf("GET %s with the token: %d %s", path, res.status, res.body)
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if res := n.do("GET", path, ""); res.status != 200 {
			t.Errorf("GET %s without a token: %d %s", path, res.status, res.body)
		}
	}
	if res := n.do("DELETE", "/v1/jobs/guarded", "", "Authorization", "Bearer s3cret"); res.status != 204 {
		t.Errorf("authorized delete: %d %s", res.status, res.body)
	}

	// Without a token, writes are open.
	open := newNode(t, dbPath(t), nodeOpts{})
	if res := open.do("POST", "/v1/jobs", body); res.status != 201 {
		t.Errorf("create without a configured token: %d %s", res.status, res.body)
	}
}

func TestRoutingProblems(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{})
	for _, c := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/nope", 404, ""},
		{"GET", "/v1/jobs/x/nope", 404, ""},
		{"GET", "/v1/jobs/", 404, ""},
		{"POST", "/v2/jobs", 404, ""},
		{"PUT", "/v1/jobs", 405, "POST"},
		{"DELETE", "/healthz", 405, "GET"},
		{"GET", "/v1/jobs/x/pause", 405, "POST"},
		{"PATCH", "/v1/jobs/x", 405, "DELETE"},
	} {
		res := n.do(c.method, c.path, "")
		p := res.problem(t, c.status)
		if !strings.Contains(p.Detail, c.path) {
			t.Errorf("%s %s: detail %q", c.method, c.path, p.Detail)
		}
		if c.allow != "" && !strings.Contains(res.header.Get("Allow"), c.allow) {
			t.Errorf("%s %s: Allow %q lacks %s", c.method, c.path, res.header.Get("Allow"), c.allow)
		}
	}
}

func TestPanicBecomesProblem(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{configure: func(c *httpapi.Config) {
		c.Metrics = http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })
	}})
	p := n.do("GET", "/metrics", "").problem(t, 500)
	if strings.Contains(p.Detail, "boom") {
		t.Errorf("panic value leaked to the client: %q", p.Detail)
	}
	if logs := n.logs.String(); !strings.Contains(logs, "level=ERROR msg=http_panic") || !strings.Contains(logs, "boom") {
		t.Errorf("panic not logged at Error:\n%s", logs)
	}
	// The server still works.
	if res := n.do("GET", "/healthz", ""); res.status != 200 {
		t.Errorf("healthz after a panic: %d", res.status)
	}
}

func TestRunsListing(t *testing.T) {
	var calls atomic.Int32
	n := newNode(t, dbPath(t), nodeOpts{claim: true, handler: func(ctx context.Context, r sqlease.Run) error {
		calls.Add(1)
		if r.Job == "flaky" {
			return errors.New("upstream said no")
		}
		return nil
	}})
	if res := n.do("POST", "/v1/jobs", `{"name": "once", "schedule": {}, "action": `+httpAction+`}`); res.status != 201 {
		t.Fatalf("create: %d %s", res.status, res.body)
	}
	if res := n.do("POST", "/v1/jobs", `{"name": "flaky", "action": `+httpAction+`, "retry": {"max_attempts": 2, "backoff": "10ms"}}`); res.status != 201 {
		t.Fatalf("create: %d %s", res.status, res.body)
	}
	runs := func(name, query string) httpapi.RunList {
		t.Helper()
		res := n.do("GET", "/v1/jobs/"+name+"/runs"+query, "")
		if res.status != 200 {
			t.Fatalf("runs of %s: %d %s", name, res.status, res.body)
		}
		var l httpapi.RunList
		res.json(t, &l)
		return l
	}
	dbtest.WaitFor(t, 10*time.Second, "runs to finish", func() bool {
		a, b := runs("once", "").Runs, runs("flaky", "").Runs
		return len(a) == 1 && a[0].Outcome == "succeeded" && len(b) == 2 && b[0].Outcome == "failed" && b[1].Outcome == "failed"
	})
	r := runs("once", "").Runs[0]
	sched, err1 := time.Parse(time.RFC3339Nano, r.ScheduledFor)
	started, err2 := time.Parse(time.RFC3339Nano, r.StartedAt)
	if err1 != nil || err2 != nil || r.FinishedAt == nil || r.Attempt != 1 || r.Holder != "node-a" || r.Epoch < 1 || r.Error != "" ||
		started.Before(sched) || r.IdempotencyKey != "once/"+sched.UTC().Format(time.RFC3339Nano) {
		t.Errorf("run %+v", r)
	}
	flaky := runs("flaky", "").Runs
	if flaky[0].Attempt != 2 || flaky[1].Attempt != 1 || !strings.Contains(flaky[0].Error, "upstream said no") {
		t.Errorf("flaky runs not newest first with errors: %+v", flaky)
	}
	if l := runs("flaky", "?limit=1").Runs; len(l) != 1 || l[0].Attempt != 2 {
		t.Errorf("limit=1: %+v", l)
	}
	// Every key of API.md is present; error and finished_at always are.
	res := n.do("GET", "/v1/jobs/once/runs", "")
	var raw struct{ Runs []map[string]any }
	res.json(t, &raw)
	for _, k := range []string{"scheduled_for", "attempt", "outcome", "holder", "epoch", "started_at", "finished_at", "error"} {
		if _, ok := raw.Runs[0][k]; !ok {
			t.Errorf("run lacks %q: %s", k, res.body)
		}
	}
	// The job shows its last run; once deleted, it is unknown.
	var j httpapi.Job
	n.do("GET", "/v1/jobs/once", "").json(t, &j)
	if j.LastRunAt == "" || j.NextRunAt != "" {
		t.Errorf("job after its one run: %+v", j)
	}
	if res := n.do("DELETE", "/v1/jobs/once", ""); res.status != 204 {
		t.Fatalf("delete: %d", res.status)
	}
	n.do("GET", "/v1/jobs/once/runs", "").problem(t, 404)
	if got := calls.Load(); got != 3 {
		t.Errorf("handler ran %d times, want 3", got)
	}
	// The observer counted the runs.
	res = n.do("GET", "/metrics", "")
	for _, want := range []string{`sqlease_job_runs_total{outcome="succeeded"} 1`, `sqlease_job_runs_total{outcome="failed"} 2`, "sqlease_is_leader 1"} {
		if !strings.Contains(string(res.body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestLeasesAndMetrics(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{})
	n.waitLeader()
	// A node's presence row fences nothing and is no lease to the API.
	if _, err := n.store.Acquire(t.Context(), sqlstore.NodeLeasePrefix+"node-a", "node-a", time.Minute); err != nil {
		t.Fatal(err)
	}
	l, res := get[httpapi.LeaseList](t, n, "/v1/leases")
	if len(l.Leases) != 1 {
		t.Fatalf("leases %s", res.body)
	}
	got := l.Leases[0]
	exp, err := time.Parse(time.RFC3339Nano, got.ExpiresAt)
	if got.Name != "lead" || got.Holder != "node-a" || got.Epoch != 1 || err != nil || got.Expired ||
		got.AcquiredAt == "" || got.RenewedAt == "" || time.Until(exp) > 5*time.Second {
		t.Errorf("lease %+v", got)
	}

	res = n.do("GET", "/metrics", "")
	if res.status != 200 || !strings.HasPrefix(res.header.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics: %d %s", res.status, res.header.Get("Content-Type"))
	}
	for _, want := range []string{"sqlease_is_leader 1", "sqlease_leader_epoch 1", "sqlease_leader_acquired_total 1",
		"sqlease_heartbeat_age_seconds ", `sqlease_acquire_attempts_total{result="acquired"} 1`, "sqlease_acquire_duration_seconds_bucket"} {
		if !strings.Contains(string(res.body), want) {
			t.Errorf("metrics lack %q:\n%s", want, res.body)
		}
	}
}

func TestNewRequiresSchedulerAndElector(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New without a scheduler did not panic")
		}
	}()
	httpapi.New(httpapi.Config{})
}
