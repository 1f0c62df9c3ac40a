package httpapi_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sqlease/sqlease/httpapi"
)

// TestAllowOverHTTP: overlap allow with max_concurrent is taken on
// creation and shown; max_concurrent below 1, or without allow, is refused
// naming the field, and nothing is stored.
func TestAllowOverHTTP(t *testing.T) {
	n := newNode(t, filepath.Join(t.TempDir(), "db"), nodeOpts{noElector: true})
	for _, bad := range []struct{ body, detail string }{
		{`{"name":"a","schedule":{"every":"1h"},"action":` + hookAction + `,"overlap":"allow","max_concurrent":0}`, "max_concurrent must be at least 1"},
		{`{"name":"a","schedule":{"every":"1h"},"action":` + hookAction + `,"overlap":"allow","max_concurrent":-3}`, "max_concurrent must be at least 1"},
		{`{"name":"a","schedule":{"every":"1h"},"action":` + hookAction + `,"max_concurrent":2}`, "set it only with overlap allow"},
		{`{"name":"a","schedule":{"every":"1h"},"action":` + hookAction + `,"overlap":"allow","max_concurrent":"2"}`, "max_concurrent"},
	} {
		if p := n.do("POST", "/v1/jobs", bad.body).problem(t, 400); !strings.Contains(p.Detail, bad.detail) {
			t.Errorf("%s: detail %q, want %q", bad.body, p.Detail, bad.detail)
		}
	}
	if names := n.jobNames(); len(names) != 0 {
		t.Fatalf("refused jobs were stored: %v", names)
	}
	var j httpapi.Job
	res := n.do("POST", "/v1/jobs", `{"name":"a","schedule":{"every":"1h"},"action":`+hookAction+`,"overlap":"allow","max_concurrent":2}`)
	res.json(t, &j)
	if res.status != 201 || j.Overlap != "allow" || j.MaxConcurrent != 2 {
		t.Fatalf("create with allow: %d %s", res.status, res.body)
	}
	j = httpapi.Job{}
	res = n.do("POST", "/v1/jobs", `{"name":"b","schedule":{"every":"1h"},"action":`+hookAction+`,"overlap":"allow"}`)
	res.json(t, &j)
	if res.status != 201 || j.Overlap != "allow" || j.MaxConcurrent != 0 || strings.Contains(string(res.body), "max_concurrent") {
		t.Fatalf("create with allow and no bound: %d %s", res.status, res.body)
	}
	n.do("GET", "/v1/jobs/a", "").json(t, &j)
	if j.MaxConcurrent != 2 {
		t.Fatalf("GET shows max_concurrent %d, want 2", j.MaxConcurrent)
	}
}
