package httpapi_test

import (
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/internal/oascheck"
)

//go:embed openapi.json
var openAPIDoc []byte

func checker(t *testing.T) *oascheck.Checker {
	t.Helper()
	c, err := oascheck.New(openAPIDoc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// noSingletons is a Singletons that has none: enough to register the
// singleton routes for the route walk (internal/e2e checks their real
// answers against the document).
type noSingletons struct{}

func (noSingletons) Create(context.Context, []byte) (httpapi.Singleton, bool, error) {
	return httpapi.Singleton{}, false, sqlease.ErrInvalidConfig
}
func (noSingletons) List(context.Context) ([]httpapi.Singleton, error) { return nil, nil }
func (noSingletons) Get(context.Context, string) (httpapi.Singleton, error) {
	return httpapi.Singleton{}, sqlease.ErrNoJob
}
func (noSingletons) SetPaused(context.Context, string, bool) (httpapi.Singleton, error) {
	return httpapi.Singleton{}, sqlease.ErrNoJob
}
func (noSingletons) Delete(context.Context, string) error { return sqlease.ErrNoJob }
func (noSingletons) SaveState(context.Context, string, int64, string, []byte) error {
	return httpapi.ErrUnauthorized
}
func (noSingletons) Heartbeat(context.Context, string, int64, string) error {
	return httpapi.ErrUnauthorized
}
func (noSingletons) Stale() []string { return nil }

// noRuns is a Checkpoints with no run here: enough to register the
// checkpoint route for the route walk.
type noRuns struct{}

func (noRuns) Authenticate(string, string) error { return httpapi.ErrUnauthorized }
func (noRuns) SaveCheckpoint(context.Context, string, int64, string, []byte) error {
	return httpapi.ErrUnauthorized
}
func (noRuns) GivenCheckpoint(string, string) (json.RawMessage, error) {
	return nil, httpapi.ErrUnauthorized
}

// TestOpenAPIRoutes: the document and the server have the same routes,
// method by method, and the same path parameters.
func TestOpenAPIRoutes(t *testing.T) {
	c := checker(t)
	var h http.Handler
	newNode(t, dbPath(t), nodeOpts{noElector: true, configure: func(cfg *httpapi.Config) {
		cfg.Singletons = noSingletons{}
		cfg.Checkpoints = noRuns{}
		h = httpapi.New(*cfg)
	}})
	routes := httpapi.Routes(h)
	sort.Strings(routes)
	documented := c.Operations()
	for _, r := range routes {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in httpapi/openapi.json", r)
		}
	}
	for _, op := range documented {
		if !slices.Contains(routes, op) {
			t.Errorf("httpapi/openapi.json documents %s, which the server does not route", op)
		}
		var inPath []string
		for _, seg := range strings.Split(strings.SplitN(op, " ", 2)[1], "/") {
			if strings.HasPrefix(seg, "{") {
				inPath = append(inPath, strings.Trim(seg, "{}"))
			}
		}
		sort.Strings(inPath)
		if got := c.PathParams(op); !slices.Equal(got, inPath) {
			t.Errorf("%s: path parameters %v documented, the path has %v", op, got, inPath)
		}
	}
	if len(routes) < 20 {
		t.Fatalf("only %d routes: the walk is broken", len(routes))
	}
}

// TestOpenAPIResponses: real answers of a real node (SQLite), successes
// and failures, are each documented for their operation and match the
// documented schema (objects allow no undocumented fields, and their
// required fields must be there).
func TestOpenAPIResponses(t *testing.T) {
	c := checker(t)
	n := newNode(t, dbPath(t), nodeOpts{})
	n.waitLeader()
	tok := newNode(t, dbPath(t), nodeOpts{holder: "node-t", noElector: true, configure: func(cfg *httpapi.Config) { cfg.APIToken = "openapi-token-0123456789" }})
	job := `{"name":"report","key":"k1","schedule":{"every":"1h"},"action":{"http":{"url":"http://127.0.0.1:9/x"}},"retry":{"max_attempts":2,"backoff":"1s"}}`
	steps := []struct {
		on               *node
		op, method, path string
		body, ct         string
		hdr              []string
	}{
		{n, "GET /healthz", "GET", "/healthz", "", "", nil},
		{n, "GET /readyz", "GET", "/readyz", "", "", nil},
		{n, "GET /metrics", "GET", "/metrics", "", "", nil},
		{n, "GET /v1/openapi.json", "GET", "/v1/openapi.json", "", "", nil},
		{n, "POST /v1/jobs", "POST", "/v1/jobs", job, "", nil},
		{n, "POST /v1/jobs", "POST", "/v1/jobs", job, "", nil},
		{n, "POST /v1/jobs", "POST", "/v1/jobs", strings.Replace(job, "1h", "2h", 1), "", nil},
		{n, "POST /v1/jobs", "POST", "/v1/jobs", `{"name":"x"}`, "", nil},
		{n, "POST /v1/jobs", "POST", "/v1/jobs", job, "text/plain", nil},
		{n, "POST /v1/jobs", "POST", "/v1/jobs", strings.Replace(job, `{"http":{"url":"http://127.0.0.1:9/x"}}`, `{"exec":{"command":["true"]}}`, 1), "", []string{"Origin", "http://evil.example"}},
		{n, "POST /v1/jobs:batch", "POST", "/v1/jobs:batch", `[{"name":"b1","schedule":{"at":"2030-01-01T00:00:00Z"},"action":{"http":{"url":"http://127.0.0.1:9/x"}}}]`, "", nil},
		{n, "POST /v1/jobs:batch", "POST", "/v1/jobs:batch", `[{"name":"b1","schedule":{"at":"2030-01-01T00:00:00Z"},"action":{"http":{"url":"http://127.0.0.1:9/x"}}}]`, "", nil},
		{n, "POST /v1/jobs:batch", "POST", "/v1/jobs:batch", `{"name":"b2"}`, "application/x-ndjson", nil},
		{n, "GET /v1/jobs", "GET", "/v1/jobs?limit=1", "", "", nil},
		{n, "GET /v1/jobs", "GET", "/v1/jobs?limit=0", "", "", nil},
		{n, "GET /v1/jobs/{name}", "GET", "/v1/jobs/report", "", "", nil},
		{n, "GET /v1/jobs/{name}", "GET", "/v1/jobs/missing", "", "", nil},
		{n, "POST /v1/jobs/{name}/pause", "POST", "/v1/jobs/report/pause", "", "", nil},
		{n, "POST /v1/jobs/{name}/resume", "POST", "/v1/jobs/report/resume", "", "", nil},
		{n, "POST /v1/jobs/{name}/trigger", "POST", "/v1/jobs/report/trigger", "", "", nil},
		{n, "POST /v1/jobs/{name}/trigger", "POST", "/v1/jobs/missing/trigger", "", "", nil},
		{n, "GET /v1/jobs/{name}/runs", "GET", "/v1/jobs/report/runs", "", "", nil},
		{n, "GET /v1/jobs/{name}/runs", "GET", "/v1/jobs/missing/runs", "", "", nil},
		{n, "GET /v1/leases", "GET", "/v1/leases", "", "", nil},
		{n, "DELETE /v1/jobs/{name}", "DELETE", "/v1/jobs/b1", "", "", nil},
		{n, "DELETE /v1/jobs/{name}", "DELETE", "/v1/jobs/b1", "", "", nil},
		{tok, "GET /v1/jobs", "GET", "/v1/jobs", "", "", nil},
		{tok, "POST /v1/jobs", "POST", "/v1/jobs", job, "", nil},
		{tok, "GET /v1/openapi.json", "GET", "/v1/openapi.json", "", "", nil},
	}
	statuses := map[string]map[int]bool{}
	for _, s := range steps {
		hdr := s.hdr
		if s.ct != "" {
			hdr = append(hdr, "Content-Type", s.ct)
		}
		res := s.on.do(s.method, s.path, s.body, hdr...)
		if err := c.Check(s.op, res.status, res.header.Get("Content-Type"), res.body); err != nil {
			t.Errorf("%s %s: %v", s.method, s.path, err)
		}
		if statuses[s.op] == nil {
			statuses[s.op] = map[int]bool{}
		}
		statuses[s.op][res.status] = true
	}
	// The script reaches the answers it is meant to.
	for op, want := range map[string][]int{"POST /v1/jobs": {201, 200, 409, 400, 415, 403, 401}, "POST /v1/jobs:batch": {201, 200, 400},
		"GET /v1/jobs/{name}": {200, 404}, "DELETE /v1/jobs/{name}": {204, 404}, "GET /v1/jobs": {200, 400, 401}} {
		for _, st := range want {
			if !statuses[op][st] {
				t.Errorf("%s never answered %d: the script does not test what it means to (%v)", op, st, statuses[op])
			}
		}
	}
}

// TestOpenAPISchemasMatchTypes: each component schema has exactly the
// JSON fields of the Go type the server encodes, and requires those it
// always writes (no omitempty).
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	c := checker(t)
	types := map[string]any{
		"Job": httpapi.Job{}, "JobList": httpapi.JobList{}, "SkippedJob": httpapi.SkippedJob{}, "Run": httpapi.Run{},
		"RunList": httpapi.RunList{}, "Lease": httpapi.Lease{}, "LeaseList": httpapi.LeaseList{}, "Problem": httpapi.Problem{},
		"BatchResult": httpapi.BatchResult{}, "BatchJob": httpapi.BatchJob{}, "Singleton": httpapi.Singleton{},
		"SingletonList": httpapi.SingletonList{}, "Schedule": httpapi.ScheduleJSON{}, "Retry": httpapi.RetryJSON{},
		"JobRequest": httpapi.JobRequest{}, "Breaker": httpapi.BreakerJSON{}, "PauseRequest": httpapi.PauseRequest{},
		"PrefixRequest": httpapi.PrefixRequest{}, "PrefixResult": httpapi.PrefixResult{},
	}
	for name, v := range types {
		props, required, ok := c.Schema(name)
		if !ok {
			t.Errorf("schema %s is missing from the document", name)
			continue
		}
		var fields, always []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			tag := rt.Field(i).Tag.Get("json")
			fname, opts, _ := strings.Cut(tag, ",")
			if fname == "" || fname == "-" {
				continue
			}
			fields = append(fields, fname)
			if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
				always = append(always, fname)
			}
		}
		sort.Strings(fields)
		sort.Strings(always)
		if !slices.Equal(props, fields) {
			t.Errorf("schema %s has properties %v; the Go type %s encodes %v", name, props, rt.Name(), fields)
		}
		if name == "Schedule" || name == "Retry" || name == "JobRequest" || name == "PrefixRequest" || name == "PauseRequest" {
			continue // request shapes: required is what a client must send
		}
		if !slices.Equal(required, always) {
			t.Errorf("schema %s requires %v; the Go type %s always writes %v", name, required, rt.Name(), always)
		}
	}
}
