package httpapi_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sqlease/sqlease/action"
	"github.com/sqlease/sqlease/httpapi"
)

func batchBody(prefix string, n int, ndjson bool) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"name":"%s-%d","key":"%s-k%d","schedule":{"every":"%dm"},"action":{"http":{"url":"http://127.0.0.1:9/x"}}}`,
			prefix, i, prefix, i, i+1)
	}
	if ndjson {
		return strings.Join(items, "\n") + "\n"
	}
	return "[" + strings.Join(items, ",\n") + "]"
}

// TestCreateJobsBatch: POST /v1/jobs:batch takes a JSON array or NDJSON,
// answers 201 with each job, 200 when a retry finds them all, and refuses a
// batch with any invalid job (naming it by index), a clash (409) or a job
// the node may not create (403) without writing anything.
func TestCreateJobsBatch(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{noElector: true, configure: func(c *httpapi.Config) { c.Exec = action.ExecPolicy{} }})

	res := n.do("POST", "/v1/jobs:batch", batchBody("a", 3, false))
	if res.status != 201 {
		t.Fatalf("array batch: %d %s", res.status, res.body)
	}
	var out httpapi.BatchResult
	res.json(t, &out)
	if out.Created != 3 || out.Existing != 0 || len(out.Jobs) != 3 || out.Jobs[2].Name != "a-2" || !out.Jobs[2].Created {
		t.Fatalf("array batch: %+v", out)
	}
	res = n.do("POST", "/v1/jobs:batch", batchBody("a", 3, false))
	if res.status != 200 {
		t.Fatalf("retried batch: %d %s, want 200", res.status, res.body)
	}
	res.json(t, &out)
	if out.Created != 0 || out.Existing != 3 {
		t.Fatalf("retried batch: %+v", out)
	}
	res = n.do("POST", "/v1/jobs:batch", batchBody("b", 2, true), "Content-Type", "application/x-ndjson")
	if res.status != 201 {
		t.Fatalf("NDJSON batch: %d %s", res.status, res.body)
	}
	if got := len(n.jobNames()); got != 5 {
		t.Fatalf("%d jobs, want 5", got)
	}

	refused := []struct {
		name, body, ct string
		status         int
		want           []string
	}{
		{"unreadable jobs", strings.Replace(strings.Replace(batchBody("c", 5, false), `"every":"2m"`, `"every":"soon"`, 1), `"name":"c-3",`, `"name":"c-3","colour":1,`, 1), "", 400,
			[]string{"jobs[1].schedule.every", "jobs[3]", "colour"}},
		{"invalid jobs", strings.Replace(strings.Replace(batchBody("c", 5, false), `{"every":"5m"}`, `{"cron":"61 * * * *"}`, 1), `"name":"c-2"`, `"name":"C 2"`, 1), "", 400,
			[]string{"jobs[2]", "name", "jobs[4]", "schedule.cron"}},
		{"unknown field", strings.Replace(batchBody("c", 2, true), `"key"`, `"colour":1,"key"`, 1), "application/x-ndjson", 400, []string{"jobs[0]", "colour"}},
		{"a clash", strings.Replace(batchBody("c", 3, false), `"key":"c-k2"`, `"key":"a-k0"`, 1), "", 409, []string{"c-2"}},
		{"an exec action", strings.Replace(batchBody("c", 3, false), `{"http":{"url":"http://127.0.0.1:9/x"}}`, `{"exec":{"command":["true"]}}`, 1), "", 403, []string{"jobs[0].action.exec"}},
		{"not JSON", "name,schedule\n", "text/csv", 415, []string{"Content-Type"}},
		{"empty", "[]", "", 400, []string{"no jobs"}},
		{"too many", batchBody("c", httpapi.MaxBatchJobs+1, true), "application/x-ndjson", 400, []string{"at most"}},
	}
	for _, c := range refused {
		var hdr []string
		if c.ct != "" {
			hdr = []string{"Content-Type", c.ct}
		}
		p := n.do("POST", "/v1/jobs:batch", c.body, hdr...).problem(t, c.status)
		for _, w := range c.want {
			if !strings.Contains(p.Detail, w) {
				t.Errorf("%s: detail %q should name %q", c.name, p.Detail, w)
			}
		}
		if strings.Contains(p.Detail, "\n") {
			t.Errorf("%s: detail is not one line: %q", c.name, p.Detail)
		}
		if got := len(n.jobNames()); got != 5 {
			t.Fatalf("%s: %d jobs after a refused batch, want 5", c.name, got)
		}
	}
}

// TestCreateJobsBatchNeedsToken: a batch is a write like any other.
func TestCreateJobsBatchNeedsToken(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{noElector: true, configure: func(c *httpapi.Config) { c.APIToken = "batch-token-0123456789" }})
	n.do("POST", "/v1/jobs:batch", batchBody("a", 2, false)).problem(t, 401)
	if res := n.do("POST", "/v1/jobs:batch", batchBody("a", 2, false), "Authorization", "Bearer batch-token-0123456789"); res.status != 201 {
		t.Fatalf("with the token: %d %s", res.status, res.body)
	}
}
