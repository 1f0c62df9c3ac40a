package httpapi_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease/httpapi"
)

// One job row that cannot be decoded is skipped and reported, not a 500
// for the whole listing; the pages around it stay complete.
func TestListSkipsCorruptRow(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{noElector: true})
	for _, name := range []string{"a", "b", "c"} {
		body := `{"name":"` + name + `","schedule":{"every":"1h"},"action":{"http":{"url":"http://127.0.0.1:9/"}}}`
		if res := n.do("POST", "/v1/jobs", body); res.status != 201 {
			t.Fatalf("create %s: %d %s", name, res.status, res.body)
		}
	}
	if _, err := n.store.DB().Exec(`UPDATE sqlease_jobs SET schedule = 'not json' WHERE name = 'b'`); err != nil {
		t.Fatal(err)
	}
	res := n.do("GET", "/v1/jobs", "")
	if res.status != 200 {
		t.Fatalf("list with a corrupt row: %d %s", res.status, res.body)
	}
	var l httpapi.JobList
	res.json(t, &l)
	if len(l.Jobs) != 2 || l.Jobs[0].Name != "a" || l.Jobs[1].Name != "c" || len(l.Skipped) != 1 || l.Skipped[0].Name != "b" {
		t.Fatalf("list: %s", res.body)
	}
	// Paged one by one, every row is accounted for exactly once.
	var seen []string
	for after, pages := "", 0; pages < 10; pages++ {
		var p httpapi.JobList
		n.do("GET", "/v1/jobs?limit=1&after="+after, "").json(t, &p)
		for _, j := range p.Jobs {
			seen = append(seen, j.Name)
		}
		for _, s := range p.Skipped {
			seen = append(seen, "!"+s.Name)
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if strings.Join(seen, " ") != "a !b c" {
		t.Fatalf("pages saw %v", seen)
	}
}

// The run ledger pages with a cursor past any length.
func TestRunsPaged(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{noElector: true})
	if res := n.do("POST", "/v1/jobs", `{"name":"j","schedule":{"every":"1h"},"action":{"http":{"url":"http://127.0.0.1:9/"}}}`); res.status != 201 {
		t.Fatalf("create: %d %s", res.status, res.body)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const total = 1205
	tx, err := n.store.DB().Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := range total {
		at := base.Add(time.Duration(i/2) * time.Minute).Format("2006-01-02 15:04:05.000")
		if _, err := tx.Exec(`INSERT INTO sqlease_runs (job_id, job_name, scheduled_for, attempt, holder_id, epoch, started_at, finished_at, outcome)
			VALUES ((SELECT id FROM sqlease_jobs WHERE name = 'j'), 'j', ?, ?, 'h', 1, ?, ?, 'succeeded')`, at, i%2+1, at, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var prev string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("too many pages")
		}
		var p httpapi.RunList
		res := n.do("GET", "/v1/jobs/j/runs?limit=1000&after="+url.QueryEscape(after), "")
		if res.status != 200 {
			t.Fatalf("page %d: %d %s", pages, res.status, res.body)
		}
		res.json(t, &p)
		for _, r := range p.Runs {
			key := fmt.Sprintf("%s/%d", r.ScheduledFor, r.Attempt)
			if seen[key] {
				t.Fatalf("run %s on two pages", key)
			}
			if prev != "" && key >= prev {
				t.Fatalf("runs not newest first: %s after %s", key, prev)
			}
			seen[key], prev = true, key
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if len(seen) != total {
		t.Fatalf("paged through %d runs, want %d", len(seen), total)
	}
	n.do("GET", "/v1/jobs/j/runs?after=garbage", "").problem(t, 400)
}

// A storage fault is a 503 that names it (and Retry-After), not an opaque
// 500: the client's request was fine.
func TestStorageFaultIs503WithReason(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{noElector: true})
	if _, err := n.store.DB().Exec(`ALTER TABLE sqlease_jobs RENAME TO sqlease_jobs_away`); err != nil {
		t.Fatal(err)
	}
	res := n.do("GET", "/v1/jobs", "")
	p := res.problem(t, 503)
	if !strings.Contains(p.Detail, "database error") || !strings.Contains(p.Detail, "sqlease_jobs") || res.header.Get("Retry-After") == "" {
		t.Fatalf("storage fault: %s (Retry-After %q)", res.body, res.header.Get("Retry-After"))
	}
	res = n.do("POST", "/v1/jobs", `{"name":"a","schedule":{},"action":{"http":{"url":"http://127.0.0.1:9/"}}}`)
	res.problem(t, 503)
}
