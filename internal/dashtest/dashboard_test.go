// Package dashtest drives the dashboard in a real browser: headless
// Chromium (Debian's package, which scripts/test.sh installs when missing),
// through chromedp, against real "sqlease serve" processes on a real
// PostgreSQL.
//
// go test ./internal/dashtest -args -screenshots docs/ also writes
// screenshots of the main pages (light and dark) into docs/:
// scripts/screenshots.sh does that for the README.
package dashtest

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/internal/pgtest"
	"github.com/sqlease/sqlease/postgres"
)

var screenshots = flag.String("screenshots", "", "directory to write screenshots of the main pages into (e.g. docs/)")

var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sqlease-dashtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashtest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary, err = fleettest.BuildDaemon(dir, os.Getenv("SQLEASE_E2E_RACE") != "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashtest:", err)
		return 1
	}
	return m.Run()
}

// Timings of the fleets: a failover within lease + acquire interval.
var timing = []string{"--lease-duration", "2s", "--renew-interval", "500ms", "--acquire-interval", "200ms"}

const (
	failoverBound = 2*time.Second + 200*time.Millisecond
	refreshEvery  = 2 * time.Second // dashboard.DefaultRefreshInterval
)

func database(t *testing.T) string {
	t.Helper()
	u := os.Getenv("SQLEASE_TEST_POSTGRES_URL")
	if u == "" {
		t.Fatal("SQLEASE_TEST_POSTGRES_URL is not set: run bash scripts/test.sh ./internal/dashtest/")
	}
	return pgtest.CreateDatabase(t, u)
}

// browser starts headless Chromium for the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: scripts/test.sh installs it (apt-get install -y chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

func run(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// eval evaluates a JavaScript expression in the page, awaiting a promise.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(tctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// waitFor polls the expression (a boolean) in the page until it holds.
func waitFor(t *testing.T, ctx context.Context, timeout time.Duration, what, expr string) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ok, err := chromedp.Run(tctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return time.Now()
		}
		if time.Now().After(deadline) {
			page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("main") ? document.querySelector("main").innerText : document.body.innerText`))
			t.Fatalf("within %v: %s (%v); the page says:\n%s", timeout, what, err, page)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// text is the text of the first element sel matches.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return strings.TrimSpace(eval[string](t, ctx, fmt.Sprintf(`document.querySelector(%q).textContent`, sel)))
}

// shoot writes screenshots of the page, light and dark, when -screenshots
// is set.
func shoot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if *screenshots == "" {
		return
	}
	for _, scheme := range []string{"light", "dark"} {
		if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}}); err != nil {
			t.Fatal(err)
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(*screenshots, "dashboard-"+name+"-"+scheme+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{}); err != nil {
		t.Fatal(err)
	}
}

// leader waits for a node's leader_acquired line and returns the node and
// the epoch.
func leader(t *testing.T, d *fleettest.Daemons, timeout time.Duration, not string) (*fleettest.Node, int64) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, n := range d.Running() {
			if n.Holder == not {
				continue
			}
			for _, l := range n.Log() {
				if l.Msg == "leader_acquired" {
					return n, l.Int("lease_epoch")
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no leader (other than %q) within %v", not, timeout)
	return nil, 0
}

func createJob(t *testing.T, n *fleettest.Node, name string, hdr ...string) {
	t.Helper()
	job := map[string]any{"name": name, "schedule": map[string]any{"every": "1s"},
		"action": map[string]any{"http": map[string]any{"url": "http://127.0.0.1:9/hook"}}}
	code, body, err := doAuth(n, "POST", "/v1/jobs", job, hdr...)
	if err != nil || code != 201 {
		t.Fatalf("create job %s: %d %s %v", name, code, body, err)
	}
}

func doAuth(n *fleettest.Node, method, path string, body any, hdr ...string) (int, []byte, error) {
	if len(hdr) == 0 {
		return n.Do(method, path, body)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequest(method, n.URL(path), bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	return res.StatusCode, out, err
}

func paused(t *testing.T, db *sql.DB, job string) bool {
	t.Helper()
	var p bool
	if err := db.QueryRow(`SELECT paused FROM sqlease_jobs WHERE name = $1`, job).Scan(&p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFailoverOnPage: the overview names the real leader and epoch; after
// kill -9 of the leader the open page shows the new leader and the
// taken_over row within the failover bound plus one refresh, without a
// reload; pausing a job from the page pauses it in the database.
func TestFailoverOnPage(t *testing.T) {
	url := database(t)
	d := fleettest.NewDaemons(t, binary, url, timing...)
	d.Start("node-a", "node-b", "node-c")
	lead, epoch := leader(t, d, 10*time.Second, "")
	var watcher *fleettest.Node
	for _, n := range d.Running() {
		if n != lead {
			watcher = n
			break
		}
	}
	createJob(t, watcher, "nightly-report")
	createJob(t, watcher, "billing-sync")
	ctx := browser(t)

	run(t, ctx, chromedp.Navigate(watcher.URL("/")))
	waitFor(t, ctx, 5*time.Second, "the overview names the leader",
		fmt.Sprintf(`document.querySelector("#leader") && document.querySelector("#leader").textContent === %q && document.querySelector("#epoch").textContent === "%d"`, lead.Holder, epoch))
	// The page agrees with the database's lease row.
	code, body, err := watcher.Do("GET", "/v1/leases", nil)
	if err != nil || code != 200 || !strings.Contains(string(body), `"holder":"`+lead.Holder+`"`) || !strings.Contains(string(body), `"epoch":`+strconv.FormatInt(epoch, 10)) {
		t.Fatalf("leases: %d %s %v", code, body, err)
	}
	if got := text(t, ctx, ".events tbody tr:first-child"); !strings.Contains(got, lead.Holder) {
		t.Errorf("the latest history row is not the leader's acquisition: %q", got)
	}
	// Every node is listed, the followers (which hold no other lease)
	// by their presence leases.
	for _, n := range d.Running() {
		role := "follower"
		if n == lead {
			role = "leader"
		}
		waitFor(t, ctx, 5*time.Second, n.Holder+" listed as "+role+", ready, with its version",
			fmt.Sprintf(`[...document.querySelectorAll("section[aria-labelledby=nodes-h] tbody tr")].some(r =>
				r.querySelector("th").textContent.startsWith(%q) && r.querySelector("td.role").textContent === %q && !r.classList.contains("gone") &&
				r.querySelector("td.status .badge").textContent === "ready" && r.querySelector("td code") && r.querySelector("td code").textContent.length > 0)`, n.Holder, role))
	}
	// Both jobs post to a port that refuses: every run fails, and the
	// overview leads with them.
	waitFor(t, ctx, 10*time.Second, "the failing jobs at the top", `document.querySelector("#verdict").textContent.startsWith("Yes") &&
		document.querySelectorAll("#failing-jobs tbody tr").length === 2 && document.querySelector("#failing-jobs td.err").textContent.includes("connection refused")`)
	shoot(t, ctx, "overview")
	// Readable without JavaScript: the leader is in the served HTML.
	if _, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, chromedp.Navigate(watcher.URL("/")))
	if got := text(t, ctx, "#leader"); got != lead.Holder {
		t.Errorf("without JavaScript the overview names %q, want %q", got, lead.Holder)
	}
	if !eval[bool](t, ctx, fmt.Sprintf(`!!document.querySelector("svg#timeline-hour rect.term[data-holder='%s'][data-epoch='%d']")`, lead.Holder, epoch)) {
		t.Errorf("without JavaScript the overview has no timeline with %s's term", lead.Holder)
	}
	if _, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: false}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, chromedp.Navigate(watcher.URL("/")))
	waitFor(t, ctx, 5*time.Second, "the overview again", `!!document.querySelector("#leader")`)

	// kill -9 the leader; the open page follows without a reload.
	eval[int](t, ctx, `window.noReload = 1`)
	lead.Kill()
	killed := lead.KilledAt()
	bound := failoverBound + refreshEvery + 1500*time.Millisecond
	seen := waitFor(t, ctx, bound, "the page shows a new leader and its takeover",
		fmt.Sprintf(`(() => {
			const l = document.querySelector("#leader"), e = document.querySelector("#epoch");
			const row = document.querySelector(".events tbody tr:first-child");
			return !!l && !!e && !!row && l.textContent !== %q && l.textContent !== "No leader" &&
				e.textContent === "%d" && row.textContent.includes("taken over") && row.textContent.includes(l.textContent);
		})()`, lead.Holder, epoch+1))
	t.Logf("kill -9 of %s → the page shows the new leader and the taken_over row after %v (bound %v)", lead.Holder, seen.Sub(killed).Round(time.Millisecond), bound)
	if eval[int](t, ctx, `window.noReload || 0`) != 1 {
		t.Fatal("the page was reloaded")
	}
	newLead := text(t, ctx, "#leader")
	if n := d.Node(newLead); n == nil || n.Exited() {
		t.Fatalf("the page names %q, not a running node", newLead)
	}
	if row := text(t, ctx, ".events tbody tr:first-child"); !strings.Contains(row, "expired without a release") || !strings.Contains(row, lead.Holder) {
		t.Errorf("the takeover row does not explain itself: %q", row)
	}
	// The killed node is marked unreachable within the failover bound (its
	// presence lease is live for 90 s more), and the verdict says so.
	gone := waitFor(t, ctx, bound, lead.Holder+" marked unreachable",
		fmt.Sprintf(`[...document.querySelectorAll("section[aria-labelledby=nodes-h] tbody tr")].some(r =>
			r.querySelector("th").textContent.startsWith(%q) && r.querySelector("td.status .badge").textContent === "unreachable" &&
			r.querySelector("td.status").textContent.includes("taken over by"))`, lead.Holder))
	t.Logf("kill -9 of %s → the page marks it unreachable after %v (bound %v; its presence lease would have taken 90 s)", lead.Holder, gone.Sub(killed).Round(time.Millisecond), bound)
	if v := text(t, ctx, "#verdict"); !strings.HasPrefix(v, "Yes") || !strings.Contains(text(t, ctx, "#health"), "1 node unreachable") {
		t.Errorf("the verdict after the kill: %q", text(t, ctx, "#health"))
	}
	// The timeline: the killed leader's term ran out, a gap of about a
	// lease duration, the new leader's term from the takeover on.
	waitFor(t, ctx, refreshEvery+time.Second, "the timeline shows the gap and the new leader", fmt.Sprintf(`(() => {
		const svg = document.querySelector("svg#timeline-hour"); if (!svg) return false;
		const old = svg.querySelector("rect.term[data-holder='%s'][data-epoch='%d'][data-ended=expired]");
		const cur = svg.querySelector("rect.term[data-holder='%s'][data-epoch='%d'][data-ended=leading]");
		if (!old || !cur) return false;
		const gaps = [...svg.querySelectorAll("rect.gap")].map(g => [Date.parse(g.dataset.from), Date.parse(g.dataset.to)]);
		return gaps.some(([f, t]) => t - f >= 1500 && t - f <= 3000 && parseFloat(cur.getAttribute("x")) >= parseFloat(old.getAttribute("x")));
	})()`, lead.Holder, epoch, newLead, epoch+1))
	if desc := text(t, ctx, "svg#timeline-hour desc"); !strings.Contains(desc, newLead+" led epoch "+strconv.FormatInt(epoch+1, 10)) {
		t.Errorf("the timeline's text alternative does not name the new leader: %q", desc)
	}
	shoot(t, ctx, "overview-after-failover")

	// Pause a job from the page: the link, the confirmation, the database.
	pdb, err := postgres.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer pdb.Close()
	run(t, ctx, chromedp.Navigate(watcher.URL("/ui/jobs")))
	waitFor(t, ctx, 5*time.Second, "the job list", `document.querySelectorAll("tbody tr").length === 2`)
	shoot(t, ctx, "jobs")
	run(t, ctx, chromedp.Click(chromedp.CSS(`a[href="/ui/jobs/nightly-report"]`)))
	waitFor(t, ctx, 5*time.Second, "the job page", `location.pathname === "/ui/jobs/nightly-report" && !!document.querySelector("#job-state")`)
	waitFor(t, ctx, 10*time.Second, "a run in the ledger", `document.querySelectorAll("table tbody tr td .badge").length > 0`)
	shoot(t, ctx, "job")
	if paused(t, pdb, "nightly-report") {
		t.Fatal("paused before the click")
	}
	run(t, ctx, chromedp.Click(chromedp.CSS(`a[href$="confirm?action=pause"]`)))
	waitFor(t, ctx, 5*time.Second, "the confirmation", `!!document.querySelector("#confirm")`)
	if paused(t, pdb, "nightly-report") {
		t.Fatal("paused before the confirmation")
	}
	run(t, ctx, chromedp.Click(chromedp.CSS("#confirm")))
	waitFor(t, ctx, 5*time.Second, "the job page after pausing", `location.search.includes("done=pause") && document.querySelector("#job-state").textContent === "paused"`)
	if !paused(t, pdb, "nightly-report") {
		t.Fatal("the page says paused, the database does not")
	}
	if paused(t, pdb, "billing-sync") {
		t.Fatal("another job was paused")
	}
	// Paused, its ledger stands still: the job page's pictures count what
	// the API lists.
	time.Sleep(time.Second) // a run in flight at the pause finishes
	var ledger struct {
		Runs []struct {
			Outcome string `json:"outcome"`
			Holder  string `json:"holder"`
		} `json:"runs"`
		Next string `json:"next"`
	}
	code, body, err = watcher.Do("GET", "/v1/jobs/nightly-report/runs?limit=300", nil)
	if err != nil || code != 200 || json.Unmarshal(body, &ledger) != nil || ledger.Next != "" {
		t.Fatalf("runs: %d %s %v", code, body, err)
	}
	want := map[string]float64{}
	perNode := map[string]float64{}
	for _, r := range ledger.Runs {
		want[r.Outcome]++
		perNode[r.Holder]++
	}
	run(t, ctx, chromedp.Navigate(watcher.URL("/ui/jobs/nightly-report")))
	got := eval[map[string]float64](t, ctx, `(() => { const c = {};
		document.querySelectorAll("svg.runs g.bucket").forEach(g => g.dataset.runs.split(",").forEach(p => { const [n, o] = p.split(" "); c[o] = (c[o] || 0) + +n; }));
		return c; })()`)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the runs picture counts %v, the ledger has %v", got, want)
	}
	gotNodes := eval[map[string]float64](t, ctx, `Object.fromEntries([...document.querySelectorAll("svg#runs-per-node rect.bar")].map(r => [r.dataset.label, +r.dataset.count]))`)
	if fmt.Sprint(gotNodes) != fmt.Sprint(perNode) {
		t.Errorf("runs per node drawn %v, the ledger has %v", gotNodes, perNode)
	}
	if n := eval[float64](t, ctx, `document.querySelectorAll("svg.durations circle").length`); n != float64(len(ledger.Runs)) {
		t.Errorf("%v dots in the durations picture for %d finished runs", n, len(ledger.Runs))
	}
	shoot(t, ctx, "job-pictures")

	// A graceful stop of the leader: its release and the next holder's
	// acquisition, each with its reason, in the history every node shows.
	stopped := d.Node(newLead)
	var last *fleettest.Node
	for _, n := range d.Running() {
		if n != stopped {
			last = n
		}
	}
	stopped.Term()
	if !stopped.WaitExit(10 * time.Second) {
		t.Fatalf("%s did not stop", newLead)
	}
	run(t, ctx, chromedp.Navigate(last.URL("/ui/history")))
	waitFor(t, ctx, 5*time.Second, "the history's timelines", `!!document.querySelector("svg#timeline-hour") && !!document.querySelector("svg#timeline-day")`)
	waitFor(t, ctx, failoverBound+refreshEvery+1500*time.Millisecond, "the release and the next acquisition in the history",
		fmt.Sprintf(`(() => {
			const rows = [...document.querySelectorAll(".events tbody tr")].map(r => r.textContent.replace(/\s+/g, " "));
			return rows.length >= 4 && rows[0].includes("acquired") && rows[0].includes("%[1]s released epoch %[2]d") &&
				rows[1].includes("released") && rows[1].includes("%[1]s") && rows[1].includes("shutdown");
		})()`, newLead, epoch+1))
	shoot(t, ctx, "history")
}

// TestNoTokenNoChange: a page without the API token cannot change
// anything — with a token set (no sign-in: every page asks for it; forged
// posts are refused), and without one on a node listening beyond loopback
// (read-only). Signing in with the token allows the change.
func TestNoTokenNoChange(t *testing.T) {
	url := database(t)
	const token = "dashtest-token-0123456789abcdef"
	d := fleettest.NewDaemons(t, binary, url, timing...)
	guarded := d.Launch("guarded", "--api-token", token)
	open := d.Launch("open", "--http", "0.0.0.0:0")
	for _, n := range []*fleettest.Node{guarded, open} {
		l := n.WaitLog(30*time.Second, "node_started", func(l fleettest.LogLine) bool { return l.Msg == "node_started" })
		_, port, err := net.SplitHostPort(l.Str("http"))
		if err != nil {
			t.Fatal(err)
		}
		n.Addr = net.JoinHostPort("127.0.0.1", port)
	}
	createJob(t, guarded, "payroll", "Authorization", "Bearer "+token)
	pdb, err := postgres.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer pdb.Close()
	ctx := browser(t)

	// With a token: every page asks for it first.
	run(t, ctx, chromedp.Navigate(guarded.URL("/ui/jobs/payroll")))
	waitFor(t, ctx, 5*time.Second, "the sign-in page", `location.pathname === "/ui/login" && !!document.querySelector("#token")`)
	shoot(t, ctx, "sign-in")
	// A forged form post from this origin, without a session: refused.
	status := eval[float64](t, ctx, `fetch("/ui/jobs/payroll/pause", {method: "POST", body: new URLSearchParams({csrf: "guess"})}).then(r => r.status)`)
	if status != 403 {
		t.Errorf("pause without a sign-in: status %v, want 403", status)
	}
	// The API's own pause without the token: refused too.
	status = eval[float64](t, ctx, `fetch("/v1/jobs/payroll/pause", {method: "POST", headers: {"Content-Type": "application/json"}}).then(r => r.status)`)
	if status != 401 {
		t.Errorf("API pause without the token: status %v, want 401", status)
	}
	// A wrong token signs nobody in.
	run(t, ctx, chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token"), chromedp.Click(chromedp.CSS("#sign-in")))
	waitFor(t, ctx, 5*time.Second, "the refusal", `!!document.querySelector("[role=alert]")`)
	if paused(t, pdb, "payroll") {
		t.Fatal("a page without the token paused the job")
	}
	// The right one does; the session cookie is out of the page's reach.
	run(t, ctx, chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#sign-in")))
	waitFor(t, ctx, 5*time.Second, "the job page after signing in", `location.pathname === "/ui/jobs/payroll" && !!document.querySelector("#job-state")`)
	if c := eval[string](t, ctx, `document.cookie`); strings.Contains(c, "sqlease_dashboard") {
		t.Errorf("the session cookie is readable by scripts: %q", c)
	}
	// A post with the session but without its CSRF token: refused.
	status = eval[float64](t, ctx, `fetch("/ui/jobs/payroll/pause", {method: "POST", body: new URLSearchParams({csrf: "guess"})}).then(r => r.status)`)
	if status != 403 || paused(t, pdb, "payroll") {
		t.Fatalf("pause with a wrong CSRF token: status %v, paused %v", status, paused(t, pdb, "payroll"))
	}
	// By keyboard alone: Tab to the action, Enter, Enter on the
	// confirmation (its button has the focus).
	for i := 0; ; i++ {
		if i == 40 {
			t.Fatal("Tab never reached the pause link")
		}
		run(t, ctx, chromedp.KeyEvent(kb.Tab))
		if eval[bool](t, ctx, `!!document.activeElement && (document.activeElement.getAttribute("href") || "").endsWith("confirm?action=pause")`) {
			break
		}
	}
	run(t, ctx, chromedp.KeyEvent(kb.Enter))
	waitFor(t, ctx, 5*time.Second, "the confirmation, its button focused", `!!document.querySelector("#confirm") && document.activeElement === document.querySelector("#confirm")`)
	shoot(t, ctx, "confirm")
	run(t, ctx, chromedp.KeyEvent(kb.Enter))
	waitFor(t, ctx, 5*time.Second, "paused", `document.querySelector("#job-state") && document.querySelector("#job-state").textContent === "paused"`)
	if !paused(t, pdb, "payroll") {
		t.Fatal("signed in, the pause did not reach the database")
	}

	// Without a token, beyond loopback: read-only, whatever the page tries.
	run(t, ctx, chromedp.Navigate(open.URL("/ui/jobs/payroll")))
	waitFor(t, ctx, 5*time.Second, "the job page", `!!document.querySelector("#job-state")`)
	if n := eval[float64](t, ctx, `document.querySelectorAll("a[href*=confirm]").length`); n != 0 {
		t.Errorf("a read-only page offers %v actions", n)
	}
	if s := text(t, ctx, ".who .tag"); s != "read-only" {
		t.Errorf("the page does not say read-only: %q", s)
	}
	status = eval[float64](t, ctx, `fetch("/ui/jobs/payroll/confirm?action=resume").then(r => r.status)`)
	if status != 403 {
		t.Errorf("the confirmation page beyond loopback: status %v, want 403", status)
	}
	status = eval[float64](t, ctx, `fetch("/ui/jobs/payroll/resume", {method: "POST", body: new URLSearchParams({csrf: "x"})}).then(r => r.status)`)
	if status != 403 || !paused(t, pdb, "payroll") {
		t.Fatalf("resume beyond loopback without a token: status %v, paused %v", status, paused(t, pdb, "payroll"))
	}
	var got struct {
		State string `json:"state"`
	}
	code, body, err := open.Do("GET", "/v1/jobs/payroll", nil)
	if err != nil || code != 200 || json.Unmarshal(body, &got) != nil || got.State != "paused" {
		t.Fatalf("job after the attempts: %d %s %v", code, body, err)
	}
}

// TestBrokenFirst: what is broken leads the overview, from real nodes — a
// job failing every run (its HTTP endpoint refuses) with its last error
// and a failing badge, a singleton that never heartbeats (stale) and the
// node running it not ready with /readyz's own reason, singleton_stale.
func TestBrokenFirst(t *testing.T) {
	url := database(t)
	d := fleettest.NewDaemons(t, binary, url, timing...)
	d.Start("node-a", "node-b")
	leader(t, d, 10*time.Second, "")
	n := d.Running()[0]
	createJob(t, n, "payments-export") // to 127.0.0.1:9: refused, every run
	code, body, err := n.Do("POST", "/v1/singletons", map[string]any{"name": "ingest", "command": []string{"sleep", "600"},
		"heartbeat": "1s", "stop_timeout": "1s"})
	if err != nil || code != http.StatusCreated {
		t.Fatalf("create singleton: %d %s %v", code, body, err)
	}
	ctx := browser(t)
	run(t, ctx, chromedp.Navigate(n.URL("/")))
	waitFor(t, ctx, 15*time.Second, "the failing job, the stale singleton and a node not ready at the top",
		`(() => {
			const h = document.querySelector("#health"); if (!h) return false;
			const job = document.querySelector("#failing-jobs a[href='/ui/jobs/payments-export']");
			const err = job && job.closest("tr").querySelector("td.err").textContent;
			const s = [...document.querySelectorAll("#failing-singletons tbody tr")].find(r => r.querySelector("th").textContent === "ingest");
			const nr = [...document.querySelectorAll(".nodes tbody tr")].find(r => r.querySelector("td.status .badge").textContent === "not ready");
			return document.querySelector("#verdict").textContent.startsWith("Yes") && !!err && err.length > 0 &&
				!!s && s.textContent.includes("stale") && !!nr && nr.textContent.includes("singleton_stale") && nr.textContent.includes("ingest");
		})()`)
	// The page's reason is that node's /readyz.
	holder := eval[string](t, ctx, `[...document.querySelectorAll(".nodes tbody tr")].find(r => r.querySelector("td.status .badge").textContent === "not ready").querySelector("th").firstChild.textContent.trim()`)
	node := d.Node(holder)
	if node == nil {
		t.Fatalf("the page names %q, not a node", holder)
	}
	if res, err := http.Get(node.URL("/readyz")); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 503 || !strings.Contains(string(b), "singleton_stale=ingest") {
			t.Errorf("%s's /readyz: %d %s, the page says not ready: singleton_stale", holder, res.StatusCode, b)
		}
	}
	shoot(t, ctx, "overview-broken")
	run(t, ctx, chromedp.Navigate(n.URL("/ui/jobs")))
	waitFor(t, ctx, 5*time.Second, "the failing badge", `[...document.querySelectorAll("tbody tr")].some(r => r.textContent.includes("payments-export") && r.querySelector(".badge").textContent === "failing")`)
}

// TestFollowerKilled: a follower holds no lease but its presence (renewed
// every 30 s for 90 s); killed with -9, it is marked unreachable within
// moments all the same, from the database's sessions (its lease feed
// connection is named after it), and its presence is still live then.
func TestFollowerKilled(t *testing.T) {
	url := database(t)
	d := fleettest.NewDaemons(t, binary, url, timing...)
	d.Start("node-a", "node-b", "node-c")
	lead, _ := leader(t, d, 10*time.Second, "")
	var watcher, victim *fleettest.Node
	for _, n := range d.Running() {
		switch {
		case n == lead:
		case watcher == nil:
			watcher = n
		default:
			victim = n
		}
	}
	ctx := browser(t)
	run(t, ctx, chromedp.Navigate(watcher.URL("/")))
	row := func(state string) string {
		return fmt.Sprintf(`[...document.querySelectorAll(".nodes tbody tr")].some(r =>
			r.querySelector("th").textContent.startsWith(%q) && r.querySelector("td.status .badge").textContent === %q)`, victim.Holder, state)
	}
	waitFor(t, ctx, 10*time.Second, victim.Holder+" ready", row("ready"))
	victim.Kill()
	killed := victim.KilledAt()
	bound := refreshEvery + 1500*time.Millisecond
	seen := waitFor(t, ctx, bound, victim.Holder+" unreachable", row("unreachable"))
	t.Logf("kill -9 of the follower %s → the page marks it unreachable after %v (bound %v; its presence lease lives 90 s)", victim.Holder, seen.Sub(killed).Round(time.Millisecond), bound)
	if why := eval[string](t, ctx, fmt.Sprintf(`[...document.querySelectorAll(".nodes tbody tr")].find(r => r.querySelector("th").textContent.startsWith(%q)).querySelector("td.status").textContent`, victim.Holder)); !strings.Contains(why, "database session is gone") {
		t.Errorf("the reason: %q", why)
	}
	// Its presence lease is live still: the page did not wait for it.
	pdb, err := postgres.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer pdb.Close()
	var live bool
	if err := pdb.QueryRow(`SELECT expires_at > clock_timestamp() FROM sqlease_leases WHERE lease_name = $1`, "node:"+victim.Holder).Scan(&live); err != nil || !live {
		t.Errorf("the presence lease of %s is not live (%v): the test proves nothing", victim.Holder, err)
	}
	if v := text(t, ctx, "#verdict"); !strings.HasPrefix(v, "Yes") {
		t.Errorf("the verdict after killing a follower: %q", v)
	}
}
