package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/dashboard"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

type site struct {
	t      testing.TB
	srv    *httptest.Server
	store  *sqlstore.Store
	sched  *scheduler.Scheduler
	client *http.Client
}

// newSite serves the dashboard through the API handler, as the daemon
// does, on a real SQLite database.
func newSite(t testing.TB, token, listen string, opts ...func(*dashboard.Config)) *site {
	t.Helper()
	store := dbtest.SQLite(t)
	sched, err := scheduler.New(scheduler.Config{Store: store, Holder: "node-a",
		Handler: func(context.Context, sqlease.Run) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	el, err := election.New(election.Config{Store: store, LeaseName: "lead", HolderID: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := dashboard.Config{Store: store, Scheduler: sched, Elector: el, APIToken: token, ListenAddr: listen}
	for _, o := range opts {
		o(&cfg)
	}
	d, err := dashboard.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Scheduler: sched, Leases: store, Elector: el, APIToken: token,
		ListenAddr: listen, Dashboard: d}))
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &site{t: t, srv: srv, store: store, sched: sched, client: client}
}

func (s *site) get(path string) (int, string, http.Header) {
	s.t.Helper()
	res, err := s.client.Get(s.srv.URL + path)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header
}

func (s *site) post(path string, form url.Values, hdr ...string) (int, string, http.Header) {
	s.t.Helper()
	req, _ := http.NewRequest("POST", s.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := s.client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header
}

func (s *site) job(name string, paused bool) {
	s.t.Helper()
	ctx := context.Background()
	if _, _, err := s.sched.Create(ctx, sqlease.Job{Name: name, Schedule: sqlease.Schedule{Every: time.Hour}}); err != nil {
		s.t.Fatal(err)
	}
	if paused {
		if _, err := s.sched.Pause(ctx, name); err != nil {
			s.t.Fatal(err)
		}
	}
}

// finishedRun stores attempt 1 of an occurrence of job at at (an SQLite
// time text) that finished then with outcome and errText, and its output
// unless that is empty.
func (s *site) finishedRun(job, at, outcome, errText, output string) {
	s.t.Helper()
	if _, err := s.store.DB().Exec(`INSERT INTO sqlease_runs (job_id, job_name, scheduled_for, attempt, holder_id, epoch, started_at, finished_at, outcome, error)
		VALUES ((SELECT id FROM sqlease_jobs WHERE name = ?), ?, ?, 1, 'h', 1, ?, ?, ?, ?)`, job, job, at, at, at, outcome, errText); err != nil {
		s.t.Fatal(err)
	}
	if output == "" {
		return
	}
	if _, err := s.store.DB().Exec(`INSERT INTO sqlease_run_output (job_id, scheduled_for, attempt, finished_at, output)
		VALUES ((SELECT id FROM sqlease_jobs WHERE name = ?), ?, 1, ?, ?)`, job, at, at, output); err != nil {
		s.t.Fatal(err)
	}
}

var (
	jobLink = regexp.MustCompile(`<a href="/ui/jobs/([^"/?]+)">`)
	nextRe  = regexp.MustCompile(`href="(/ui/jobs\?[^"]*after=[^"]*)" rel="next"`)
	csrfRe  = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
)

// pages follows the jobs list from path through its next links and
// returns the names in order.
func (s *site) pages(path string) (names []string, pages int) {
	s.t.Helper()
	return s.follow(path, jobLink, nextRe, 20, 0)
}

// follow walks a listing from path through its next links (next's first
// group) and returns item's first groups in order; it fails after maxPages
// pages, and on a page over maxBytes (0: unbounded).
func (s *site) follow(path string, item, next *regexp.Regexp, maxPages, maxBytes int) (items []string, pages int) {
	s.t.Helper()
	for path != "" {
		pages++
		if pages > maxPages {
			s.t.Fatal("too many pages")
		}
		code, body, _ := s.get(path)
		if code != 200 {
			s.t.Fatalf("%s: %d %s", path, code, body)
		}
		if maxBytes > 0 && len(body) > maxBytes {
			s.t.Errorf("%s: %d bytes, over %d", path, len(body), maxBytes)
		}
		for _, m := range item.FindAllStringSubmatch(body, -1) {
			items = append(items, m[1])
		}
		path = ""
		if m := next.FindStringSubmatch(body); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	return items, pages
}

// TestJobsPaged: the job list pages by name without repeats or gaps, and
// its filters (name prefix, state) keep paging right.
func TestJobsPaged(t *testing.T) {
	s := newSite(t, "", "127.0.0.1:0")
	var all, pausedJobs, prefixed []string
	for i := range 130 {
		name := fmt.Sprintf("j%03d", i)
		s.job(name, i%7 == 0)
		all = append(all, name)
		if i%7 == 0 {
			pausedJobs = append(pausedJobs, name)
		}
		if strings.HasPrefix(name, "j1") {
			prefixed = append(prefixed, name)
		}
	}
	s.job("j1", false)
	all = append(all, "j1")
	sort.Strings(all) // by name: "j1" comes after "j099"
	prefixed = append([]string{"j1"}, prefixed...)
	check := func(path string, want []string, wantPages int) {
		t.Helper()
		got, pages := s.pages(path)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: got %d names %v, want %d %v", path, len(got), got, len(want), want)
		}
		if wantPages > 0 && pages != wantPages {
			t.Errorf("%s: %d pages, want %d", path, pages, wantPages)
		}
	}
	check("/ui/jobs", all, 3)
	check("/ui/jobs?state=paused", pausedJobs, 1)
	check("/ui/jobs?prefix=j1", prefixed, 1)
	check("/ui/jobs?prefix=j12&state=paused", []string{"j126"}, 1)
	if code, _, _ := s.get("/ui/jobs?state=bogus"); code != 400 {
		t.Errorf("a bad state filter: %d", code)
	}
}

// TestRunsAndHistoryPaged: a job's ledger and the leadership history page
// newest first through every row.
func TestRunsAndHistoryPaged(t *testing.T) {
	s := newSite(t, "", "127.0.0.1:0")
	s.job("report", false)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 120 {
		at := base.Add(time.Duration(i) * time.Minute).Format("2006-01-02 15:04:05.000")
		s.finishedRun("report", at, "failed", fmt.Sprintf("boom-%03d", i), "")
	}
	for i := 1; i <= 75; i++ {
		if err := s.store.RecordLeaseEvent(context.Background(), sqlstore.LeaseEvent{Lease: "lead", Event: sqlstore.EventAcquired, Holder: fmt.Sprintf("h%03d", i), Epoch: int64(i)}, 0); err != nil {
			t.Fatal(err)
		}
	}
	follow := func(path string, item, next *regexp.Regexp) []string {
		t.Helper()
		out, _ := s.follow(path, item, next, 11, 0)
		return out
	}
	runs := follow("/ui/jobs/report", regexp.MustCompile(`boom-(\d+)`), regexp.MustCompile(`href="([^"]+)" rel="next"`))
	if len(runs) != 120 || runs[0] != "119" || runs[119] != "000" {
		t.Errorf("runs: %d, first %v", len(runs), runs[:min(3, len(runs))])
	}
	for i := 1; i < len(runs); i++ {
		if runs[i] >= runs[i-1] {
			t.Fatalf("runs not newest first at %d: %v", i, runs[i-1:i+1])
		}
	}
	hist := follow("/ui/history", regexp.MustCompile(`<td class="holder">h(\d+)</td>`), regexp.MustCompile(`href="([^"]+)" rel="next"`))
	if len(hist) != 75 || hist[0] != "075" || hist[74] != "001" {
		t.Errorf("history: %d %v", len(hist), hist)
	}
	// The live refresh fetches the main part only.
	code, body, _ := s.get("/ui/history?fragment=1")
	if code != 200 || strings.Contains(body, "<html") || !strings.Contains(body, "h075") {
		t.Errorf("fragment: %d %.200s", code, body)
	}
}

// TestTokenGuard: with an API token every page asks for a sign-in; a
// wrong token, a missing or stale CSRF token and a cross-site post change
// nothing; signed in, a confirmed pause does.
func TestTokenGuard(t *testing.T) {
	const token = "dash-token-0123456789"
	s := newSite(t, token, "127.0.0.1:0")
	s.job("payroll", false)
	for _, p := range []string{"/", "/ui/jobs", "/ui/jobs/payroll", "/ui/history", "/ui/jobs/payroll/confirm?action=pause"} {
		code, _, h := s.get(p)
		if code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/ui/login?next=") {
			t.Errorf("%s without a sign-in: %d %s", p, code, h.Get("Location"))
		}
	}
	pausedNow := func() bool {
		j, err := s.sched.Job(context.Background(), "payroll")
		if err != nil {
			t.Fatal(err)
		}
		return j.Paused
	}
	if code, _, _ := s.post("/ui/jobs/payroll/pause", url.Values{"csrf": {"x"}}); code != 403 || pausedNow() {
		t.Fatalf("pause without a sign-in: %d", code)
	}
	if code, _, _ := s.post("/ui/login", url.Values{"token": {"wrong"}, "next": {"/"}}); code != 401 {
		t.Fatalf("a wrong token: %d", code)
	}
	code, _, h := s.post("/ui/login", url.Values{"token": {token}, "next": {"/ui/jobs/payroll"}})
	if code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/ui/jobs/payroll") {
		t.Fatalf("sign-in: %d %s", code, h.Get("Location"))
	}
	if c := h.Get("Set-Cookie"); !strings.Contains(c, "HttpOnly") || !strings.Contains(c, "SameSite=Strict") {
		t.Errorf("session cookie: %s", c)
	}
	code, body, _ := s.get("/ui/jobs/payroll/confirm?action=pause")
	m := csrfRe.FindStringSubmatch(body)
	if code != 200 || m == nil {
		t.Fatalf("confirmation page: %d", code)
	}
	if code, _, _ := s.post("/ui/jobs/payroll/pause", url.Values{"csrf": {"stale"}}); code != 403 || pausedNow() {
		t.Fatalf("a wrong CSRF token: %d", code)
	}
	if code, _, _ := s.post("/ui/jobs/payroll/pause", url.Values{"csrf": {m[1]}}, "Origin", "http://evil.example"); code != 403 || pausedNow() {
		t.Fatalf("a cross-site post: %d", code)
	}
	if code, _, _ := s.post("/ui/jobs/payroll/pause", url.Values{"csrf": {m[1]}}, "Sec-Fetch-Site", "cross-site"); code != 403 || pausedNow() {
		t.Fatalf("a cross-site post (Sec-Fetch-Site): %d", code)
	}
	if code, _, h := s.post("/ui/jobs/payroll/pause", url.Values{"csrf": {m[1]}}); code != http.StatusSeeOther || !pausedNow() {
		t.Fatalf("the confirmed pause: %d %s", code, h.Get("Location"))
	}
	// Guessing is slow: a few failures per second, then 429 for everyone.
	limited := false
	for range 6 {
		if code, _, _ := s.post("/ui/login", url.Values{"token": {"guess"}}); code == http.StatusTooManyRequests {
			limited = true
			break
		}
	}
	if !limited {
		t.Error("six wrong sign-ins in a row were all answered")
	}
	time.Sleep(1100 * time.Millisecond)
	// An open redirect through next is not possible.
	if _, _, h := s.post("/ui/login", url.Values{"token": {token}, "next": {"//evil.example/"}}); !strings.HasPrefix(h.Get("Location"), "/?") {
		t.Errorf("next=//evil.example/ redirects to %s", h.Get("Location"))
	}
}

// TestReadOnlyBeyondLoopback: without a token, a node that listens beyond
// loopback shows everything and changes nothing.
func TestReadOnlyBeyondLoopback(t *testing.T) {
	s := newSite(t, "", "0.0.0.0:8080")
	s.job("payroll", false)
	code, body, _ := s.get("/ui/jobs/payroll")
	if code != 200 || strings.Contains(body, "confirm?action=") || !strings.Contains(body, "read-only") {
		t.Fatalf("job page: %d", code)
	}
	if code, _, _ := s.get("/ui/jobs/payroll/confirm?action=trigger"); code != 403 {
		t.Errorf("confirmation page: %d", code)
	}
	if code, _, _ := s.post("/ui/jobs/payroll/delete", url.Values{"csrf": {"x"}}); code != 403 {
		t.Errorf("delete: %d", code)
	}
	if _, err := s.sched.Job(context.Background(), "payroll"); err != nil {
		t.Fatalf("the job is gone: %v", err)
	}
}

// TestRunOutputShown: a run's kept output is on the job page, under its
// error, escaped.
func TestRunOutputShown(t *testing.T) {
	s := newSite(t, "", "127.0.0.1:0")
	s.job("echo", false)
	at := "2026-01-01 00:00:00.000"
	s.finishedRun("echo", at, "failed", "exec action: exit status 3", "hello <b>world</b>\n")
	code, body, _ := s.get("/ui/jobs/echo")
	if code != 200 {
		t.Fatalf("job page: %d", code)
	}
	if !strings.Contains(body, "exit status 3") || !strings.Contains(body, "<summary>Output</summary><pre><code>hello &lt;b&gt;world&lt;/b&gt;") {
		t.Errorf("job page lacks the run's escaped output:\n%s", body)
	}
}

// singletonList is the daemon's singleton host as the dashboard sees it: a
// list (the host itself is tested in internal/e2e).
type singletonList []httpapi.Singleton

func (l singletonList) List(context.Context) ([]httpapi.Singleton, error) { return l, nil }

// TestSingletonsShown: the overview lists each singleton with its status,
// holder, epoch, heartbeat age and state (escaped); with none, no section.
func TestSingletonsShown(t *testing.T) {
	beat := time.Now().Add(-3 * time.Second).UTC().Format(time.RFC3339Nano)
	s := newSite(t, "", "127.0.0.1:0", func(c *dashboard.Config) {
		c.Singletons = singletonList{{Name: "ingest", Status: "stale", Holder: "node-b", Epoch: 7, HeartbeatAt: beat,
			Restarts: 2, State: []byte(`{"cursor":"<b>41</b>"}`)}}
	})
	code, body, _ := s.get("/")
	if code != 200 {
		t.Fatalf("overview: %d", code)
	}
	row := regexp.MustCompile(`(?s)<th scope="row">ingest</th>(.*?)</tr>`).FindStringSubmatch(body)
	if row == nil {
		t.Fatalf("the overview does not list the singleton:\n%s", body)
	}
	for _, want := range []string{">stale<", "<td>node-b</td>", `>7<`, `>2<`, "&lt;b&gt;41&lt;/b&gt;"} {
		if !strings.Contains(row[1], want) {
			t.Errorf("the singleton's row lacks %q:\n%s", want, row[1])
		}
	}
	if !regexp.MustCompile(`<td>[3-9]\.[0-9] s</td>`).MatchString(row[1]) {
		t.Errorf("the singleton's row lacks its heartbeat age (3 s):\n%s", row[1])
	}
	if _, body, _ := newSite(t, "", "127.0.0.1:0").get("/"); strings.Contains(body, "Singletons</h2>") {
		t.Error("a node without singletons shows a singletons section")
	}
}
