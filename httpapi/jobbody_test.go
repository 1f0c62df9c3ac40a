package httpapi_test

// A job body the API refuses: one not spelled canonically, one with a
// field over its bound.

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sqlease/sqlease/httpapi"
)

// Issue 30 item 8: a job body's member names must be spelled as
// documented, and none given twice — in the body and in its action —
// or encoding/json reads another job than the one a person (or a
// redaction) reads. Each is a 400 naming the member.
func TestDecodeJobRefusesNonCanonicalJSON(t *testing.T) {
	for _, c := range []struct{ body, detail string }{
		{`{"Name":"a","schedule":{},"action":{"http":{"url":"http://h/"}}}`, `Name: must be spelled "name"`},
		{`{"name":"a","schedule":{"EVERY":"1m"},"action":{"http":{"url":"http://h/"}}}`, `schedule.EVERY: must be spelled "every"`},
		{`{"name":"a","name":"b","schedule":{},"action":{"http":{"url":"http://h/"}}}`, "name: appears twice"},
		{`{"name":"a","schedule":{},"action":{"http":{"url":"http://decoy/"},"http":{"url":"http://real/"}}}`, "action.http: appears twice"},
	} {
		_, err := httpapi.DecodeJob(strings.NewReader(c.body))
		if err == nil || httpapi.StatusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), c.detail) {
			t.Errorf("DecodeJob(%s) = %v, want a 400 with %q", c.body, err, c.detail)
		}
	}
}

// A job's every field is bounded (issue 30, item 6): a batch took a
// 3.9 MiB cron string per job. Each oversized field is a 400 naming it,
// whose detail does not echo the value back.
func TestJobFieldsBounded(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{noElector: true})
	huge := strings.Repeat(" ", 4<<20-64)
	act := `"action":{"http":{"url":"http://127.0.0.1:9/"}}`
	for _, tc := range []struct{ field, path, body string }{
		{"schedule.cron", "/v1/jobs:batch", `[{"name":"a","schedule":{"cron":"` + huge + `0 0 * * *"},` + act + `}]`},
		{"schedule.cron", "/v1/jobs", `{"name":"a","schedule":{"cron":"` + huge[:1<<19] + `0 0 * * *"},` + act + `}`},
		{"schedule.timezone", "/v1/jobs:batch", `[{"name":"a","schedule":{"cron":"0 0 * * *","timezone":"UTC` + huge + `"},` + act + `}]`},
		{"key", "/v1/jobs:batch", `[{"name":"a","key":"` + huge + `","schedule":{},` + act + `}]`},
		{"schedule.every", "/v1/jobs", `{"name":"a","schedule":{"every":"` + huge[:1<<19] + `1h"},` + act + `}`},
		{"schedule.at", "/v1/jobs", `{"name":"a","schedule":{"at":"` + huge[:1<<19] + `"},` + act + `}`},
		{"lock_timeout", "/v1/jobs:batch", `[{"name":"a","schedule":{},"lock_timeout":"1` + strings.Repeat("0", 1<<20) + `s",` + act + `}]`},
		{"missed_runs", "/v1/jobs:batch", `[{"name":"a","schedule":{},"missed_runs":"` + huge + `",` + act + `}]`},
	} {
		res := n.do("POST", tc.path, tc.body)
		if res.status != 400 {
			t.Errorf("%s through %s: status %d, want 400: %.300s", tc.field, tc.path, res.status, res.body)
			continue
		}
		p := res.problem(t, 400)
		if !strings.Contains(p.Detail, tc.field) || len(p.Detail) > 400 {
			t.Errorf("%s through %s: detail does not name it, or echoes it: %.400s", tc.field, tc.path, p.Detail)
		}
	}
	res := n.do("GET", "/v1/jobs", "")
	if res.status != 200 || strings.Contains(string(res.body), `"name":"a"`) {
		t.Fatalf("a refused job was stored: %d %.300s", res.status, res.body)
	}
}
