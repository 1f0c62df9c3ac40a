package httpapi_test

import (
	"encoding/json"
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
	l, res := get[httpapi.JobList](t, n, "/v1/jobs") // with a corrupt row
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

// getPages pages through a listing with limit=1000, checks that each page's
// body stays within httpapi.MaxPageBytes (plus the envelope), and returns
// the pages' bodies; items counts a page's items.
func getPages(t *testing.T, n *node, path string, items func(body []byte) (int, string)) (pages, total int) {
	t.Helper()
	after := ""
	for {
		if pages > 1000 {
			t.Fatalf("%s: too many pages", path)
		}
		res := n.do("GET", path+"?limit=1000&after="+url.QueryEscape(after), "")
		if res.status != 200 {
			t.Fatalf("%s page %d: %d %.300s", path, pages, res.status, res.body)
		}
		if len(res.body) > httpapi.MaxPageBytes+4<<10 {
			t.Fatalf("%s page %d: %d bytes, over the page budget of %d", path, pages, len(res.body), httpapi.MaxPageBytes)
		}
		k, next := items(res.body)
		if k == 0 && next != "" {
			t.Fatalf("%s page %d: empty page with next %q", path, pages, next)
		}
		pages, total = pages+1, total+k
		if next == "" {
			return pages, total
		}
		after = next
	}
}

// The run ledger is bounded in bytes (issue 30, item 1): 300 runs with
// 64 KiB of output each make pages of at most MaxPageBytes, and paging
// through them returns every run once.
func TestRunsPageBoundedInBytes(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{noElector: true})
	if res := n.do("POST", "/v1/jobs", `{"name":"j","schedule":{"every":"1h"},"action":{"http":{"url":"http://127.0.0.1:9/"}}}`); res.status != 201 {
		t.Fatalf("create: %d %s", res.status, res.body)
	}
	const total = 300
	output := strings.Repeat("o", 64<<10)
	tx, err := n.store.DB().Begin()
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range total {
		at := base.Add(time.Duration(i) * time.Minute).Format("2006-01-02 15:04:05.000")
		if _, err := tx.Exec(`INSERT INTO sqlease_runs (job_id, job_name, scheduled_for, attempt, holder_id, epoch, started_at, finished_at, outcome, error)
			VALUES ((SELECT id FROM sqlease_jobs WHERE name = 'j'), 'j', ?, 1, 'h', 1, ?, ?, 'failed', ?)`, at, at, at, strings.Repeat("e", 4<<10)); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(`INSERT INTO sqlease_run_output (job_id, scheduled_for, attempt, finished_at, output)
			VALUES ((SELECT id FROM sqlease_jobs WHERE name = 'j'), ?, 1, ?, ?)`, at, at, output); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	pages, got := getPages(t, n, "/v1/jobs/j/runs", func(body []byte) (int, string) {
		var p httpapi.RunList
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Runs {
			if r.Output == nil || len(*r.Output) != len(output) || seen[r.ScheduledFor] {
				t.Fatalf("run %s: output of %d bytes, or seen twice", r.ScheduledFor, len(*r.Output))
			}
			seen[r.ScheduledFor] = true
		}
		return len(p.Runs), p.Next
	})
	if got != total || pages < total*(64<<10)/httpapi.MaxPageBytes {
		t.Fatalf("%d runs in %d pages, want %d runs", got, pages, total)
	}
}

// Every byte of a job counts towards a page, not only its action (issue 30,
// items 1 and 6): jobs whose rows carry large schedules (written by hand, or
// before the fields were bounded) still make pages of at most MaxPageBytes.
func TestJobsPageBoundedInBytes(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{noElector: true})
	const total = 40
	for i := range total {
		body := fmt.Sprintf(`{"name":"j%02d","schedule":{"cron":"0 0 * * *"},"action":{"http":{"url":"http://127.0.0.1:9/"}}}`, i)
		if res := n.do("POST", "/v1/jobs", body); res.status != 201 {
			t.Fatalf("create: %d %s", res.status, res.body)
		}
	}
	cron := strings.Repeat(" ", 200<<10) + "0 0 * * *"
	if _, err := n.store.DB().Exec(`UPDATE sqlease_jobs SET schedule = json_object('cron', ?), client_key = name || ?`, cron, strings.Repeat("k", 100<<10)); err != nil {
		t.Fatal(err)
	}
	pages, got := getPages(t, n, "/v1/jobs", func(body []byte) (int, string) {
		var p httpapi.JobList
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		if len(p.Skipped) > 0 {
			t.Fatalf("skipped %v", p.Skipped)
		}
		return len(p.Jobs), p.Next
	})
	if got != total || pages < 4 {
		t.Fatalf("%d jobs in %d pages, want %d", got, pages, total)
	}
}

// The leadership history is bounded in bytes too (issue 30, item 1).
func TestHistoryPageBoundedInBytes(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{noElector: true})
	const total = 100
	for i := range total {
		if _, err := n.store.DB().Exec(`INSERT INTO sqlease_lease_history (lease_name, event, holder_id, lease_epoch, reason, event_at)
			VALUES ('big', 'acquired', 'h', ?, ?, '2026-01-01 00:00:00.000')`, i+1, strings.Repeat("r", 64<<10)); err != nil {
			t.Fatal(err)
		}
	}
	_, got := getPages(t, n, "/v1/leases/big/history", func(body []byte) (int, string) {
		var p httpapi.LeaseHistory
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		return len(p.Events), p.Next
	})
	if got != total {
		t.Fatalf("%d events, want %d", got, total)
	}
}
