package httpapi_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/sqlstore"
)

const hookAction = `{"http":{"url":"http://127.0.0.1:9/hook"}}`

// TestPauseReasonAndPrefixOverHTTP: POST …/pause takes an optional reason,
// shown with the state until a resume; POST /v1/jobs:pause and :resume act
// on every job whose name starts with the prefix, count them, and refuse a
// missing prefix, a bad one, an overlong reason and a reason on a resume,
// writing nothing; a trigger of a paused job is a 409 naming the state.
func TestPauseReasonAndPrefixOverHTTP(t *testing.T) {
	n := newNode(t, filepath.Join(t.TempDir(), "db"), nodeOpts{noElector: true})
	for _, name := range []string{"etl.load", "etl.clean", "report"} {
		if res := n.do("POST", "/v1/jobs", `{"name":"`+name+`","schedule":{"every":"1h"},"action":`+hookAction+`}`); res.status != 201 {
			t.Fatalf("create %s: %d %s", name, res.status, res.body)
		}
	}
	var j httpapi.Job
	res := n.do("POST", "/v1/jobs/report/pause", `{"reason":"vendor outage, INC-42"}`)
	res.json(t, &j)
	if res.status != 200 || j.State != "paused" || j.PauseReason != "vendor outage, INC-42" {
		t.Fatalf("pause with a reason: %d %s", res.status, res.body)
	}
	n.do("GET", "/v1/jobs/report", "").json(t, &j)
	if j.PauseReason != "vendor outage, INC-42" {
		t.Fatalf("get after pause: reason %q", j.PauseReason)
	}
	p := n.do("POST", "/v1/jobs/report/trigger", "").problem(t, 409)
	if !strings.Contains(p.Detail, "paused") || !strings.Contains(p.Detail, "INC-42") {
		t.Fatalf("trigger of a paused job: %q does not name the state", p.Detail)
	}
	res = n.do("POST", "/v1/jobs/report/resume", "")
	j = httpapi.Job{}
	res.json(t, &j)
	if res.status != 200 || j.State != "active" || j.PauseReason != "" {
		t.Fatalf("resume: %d %s", res.status, res.body)
	}
	for _, bad := range []struct{ path, body, field string }{
		{"/v1/jobs/report/pause", `{"reason":"` + strings.Repeat("r", 513) + `"}`, "reason"},
		{"/v1/jobs/report/pause", `{"why":"x"}`, "why"},
		{"/v1/jobs:pause", `{}`, "prefix"},
		{"/v1/jobs:pause", `{"reason":"x"}`, "prefix"},
		{"/v1/jobs:pause", ``, "prefix"},
		{"/v1/jobs:pause", `{"prefix":"ETL"}`, "prefix"},
		{"/v1/jobs:pause", `{"prefix":"etl%"}`, "prefix"},
		{"/v1/jobs:pause", `{"prefix":"etl","reason":"` + strings.Repeat("r", 513) + `"}`, "reason"},
		{"/v1/jobs:resume", `{"prefix":"etl","reason":"x"}`, "reason"},
	} {
		hdr := []string{}
		if bad.body == "" {
			hdr = []string{"Content-Type", "application/json"}
		}
		p := n.do("POST", bad.path, bad.body, hdr...).problem(t, 400)
		if !strings.Contains(p.Detail, bad.field) {
			t.Errorf("%s %s: detail %q does not name %s", bad.path, bad.body, p.Detail, bad.field)
		}
	}
	if names := pausedJobs(t, n); len(names) != 0 {
		t.Fatalf("refused requests paused %v", names)
	}

	var out httpapi.PrefixResult
	res = n.do("POST", "/v1/jobs:pause", `{"prefix":"etl.","reason":"warehouse migration"}`)
	res.json(t, &out)
	if res.status != 200 || out.Paused == nil || *out.Paused != 2 || out.Resumed != nil {
		t.Fatalf("pause etl.*: %d %s", res.status, res.body)
	}
	if got := pausedJobs(t, n); strings.Join(got, ",") != "etl.clean,etl.load" {
		t.Fatalf("paused %v", got)
	}
	n.do("GET", "/v1/jobs/etl.load", "").json(t, &j)
	if j.PauseReason != "warehouse migration" {
		t.Fatalf("etl.load reason %q", j.PauseReason)
	}
	res = n.do("POST", "/v1/jobs:resume", `{"prefix":""}`)
	out = httpapi.PrefixResult{}
	res.json(t, &out)
	if res.status != 200 || out.Resumed == nil || *out.Resumed != 3 {
		t.Fatalf("resume every job: %d %s", res.status, res.body)
	}
	if got := pausedJobs(t, n); len(got) != 0 {
		t.Fatalf("still paused: %v", got)
	}
}

func pausedJobs(t *testing.T, n *node) []string {
	t.Helper()
	var l httpapi.JobList
	n.do("GET", "/v1/jobs", "").json(t, &l)
	var out []string
	for _, j := range l.Jobs {
		if j.State == "paused" {
			out = append(out, j.Name)
		}
	}
	return out
}

// TestBreakerOverHTTP: a job's breaker is taken on creation (validated,
// naming the field) and shown with its state, judged by the database
// clock: closed, open since it opened, half_open once the cool-down is
// over; runs it skipped show as skipped.
func TestBreakerOverHTTP(t *testing.T) {
	n := newNode(t, filepath.Join(t.TempDir(), "db"), nodeOpts{noElector: true})
	for _, bad := range []struct{ body, field string }{
		{`{"name":"b","schedule":{"every":"1h"},"action":` + hookAction + `,"breaker":{"failures":0}}`, "breaker.failures"},
		{`{"name":"b","schedule":{"every":"1h"},"action":` + hookAction + `,"breaker":{"failures":2,"cool_down":"soon"}}`, "breaker.cool_down"},
		{`{"name":"b","action":` + hookAction + `,"breaker":{"failures":2}}`, "breaker"},
		{`{"name":"b","schedule":{"every":"1h"},"action":` + hookAction + `,"breaker":{"failures":2,"state":"open"}}`, "state"},
	} {
		if p := n.do("POST", "/v1/jobs", bad.body).problem(t, 400); !strings.Contains(p.Detail, bad.field) {
			t.Errorf("%s: detail %q does not name %s", bad.body, p.Detail, bad.field)
		}
	}
	var j httpapi.Job
	res := n.do("POST", "/v1/jobs", `{"name":"b","schedule":{"every":"1h"},"action":`+hookAction+`,"breaker":{"failures":2,"cool_down":"2s"}}`)
	res.json(t, &j)
	if res.status != 201 || j.Breaker == nil || j.Breaker.Failures != 2 || j.Breaker.CoolDown != "2s" || j.Breaker.State != "closed" || j.Breaker.Since != "" {
		t.Fatalf("create with a breaker: %d %s", res.status, res.body)
	}
	// Open it as a failed occurrence's finish would.
	ctx := context.Background()
	if _, err := n.sched.Trigger(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	var c []sqlstore.Claimed
	dbtest.WaitFor(t, 5*time.Second, "a claim", func() bool {
		got, err := n.store.ClaimDue(ctx, "w", 1)
		c = append(c, got...)
		return err == nil && len(c) == 1
	})
	r, err := n.store.StartRun(ctx, nil, c[0].Lock, "b", c[0].NextRunAt, 1, c[0].Lock.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.store.FinishRunBreaker(ctx, nil, c[0].Lock, r, sqlstore.Finish{Outcome: sqlease.OutcomeFailed, Error: "boom", Next: c[0].NextRunAt.Add(time.Hour)},
		sqlstore.BreakerUpdate{Failures: 2, Open: true, Changed: true}); err != nil {
		t.Fatal(err)
	}
	n.do("GET", "/v1/jobs/b", "").json(t, &j)
	if j.Breaker == nil || j.Breaker.State != "open" || j.Breaker.Since == "" || j.Breaker.ConsecutiveFailures == nil || *j.Breaker.ConsecutiveFailures != 2 {
		t.Fatalf("after opening: %+v", j.Breaker)
	}
	opened, _ := time.Parse(time.RFC3339Nano, j.Breaker.Since)
	dbtest.WaitFor(t, 10*time.Second, "half open", func() bool {
		var l httpapi.JobList
		n.do("GET", "/v1/jobs", "").json(t, &l)
		return len(l.Jobs) == 1 && l.Jobs[0].Breaker != nil && l.Jobs[0].Breaker.State == "half_open"
	})
	n.do("GET", "/v1/jobs/b", "").json(t, &j)
	if since, _ := time.Parse(time.RFC3339Nano, j.Breaker.Since); !since.Equal(opened.Add(2 * time.Second)) {
		t.Fatalf("half open since %v, want the end of the cool-down %v", since, opened.Add(2*time.Second))
	}
}

// TestOverlapOverHTTP: a job's overlap policy is taken on creation
// (validated, naming the field) and shown
// on every job, wait when none was given.
func TestOverlapOverHTTP(t *testing.T) {
	n := newNode(t, filepath.Join(t.TempDir(), "db"), nodeOpts{noElector: true})
	for _, bad := range []struct{ body, detail string }{
		{`{"name":"o","schedule":{},"action":` + hookAction + `,"overlap":"allow"}`, `overlap "allow" needs a repeating schedule`},
		{`{"name":"o","schedule":{"every":"1h"},"action":` + hookAction + `,"overlap":"buffer_one"}`, "overlap must be wait, allow, skip or cancel_running"},
		{`{"name":"o","action":` + hookAction + `,"overlap":"skip"}`, "overlap \"skip\" needs a repeating schedule"},
		{`{"name":"o","schedule":{"every":"1h"},"action":` + hookAction + `,"overlap":7}`, "overlap"},
	} {
		if p := n.do("POST", "/v1/jobs", bad.body).problem(t, 400); !strings.Contains(p.Detail, bad.detail) {
			t.Errorf("%s: detail %q, want %q", bad.body, p.Detail, bad.detail)
		}
	}
	if names := n.jobNames(); len(names) != 0 {
		t.Fatalf("refused jobs were stored: %v", names)
	}
	var j httpapi.Job
	res := n.do("POST", "/v1/jobs", `{"name":"o","schedule":{"every":"1h"},"action":`+hookAction+`,"overlap":"cancel_running"}`)
	res.json(t, &j)
	if res.status != 201 || j.Overlap != "cancel_running" {
		t.Fatalf("create with overlap: %d %s", res.status, res.body)
	}
	res = n.do("POST", "/v1/jobs", `{"name":"w","schedule":{"every":"1h"},"action":`+hookAction+`}`)
	res.json(t, &j)
	if res.status != 201 || j.Overlap != "wait" {
		t.Fatalf("create without overlap: %d %s", res.status, res.body)
	}
	// wait given is the job created without it: the same content.
	if res := n.do("POST", "/v1/jobs", `{"name":"w","schedule":{"every":"1h"},"action":`+hookAction+`,"overlap":"wait"}`); res.status != 200 {
		t.Fatalf("the same job with overlap wait: %d %s", res.status, res.body)
	}
	n.do("GET", "/v1/jobs/o", "").json(t, &j)
	if j.Overlap != "cancel_running" {
		t.Fatalf("GET: overlap %q", j.Overlap)
	}
}
