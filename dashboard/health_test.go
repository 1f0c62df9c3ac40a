package dashboard_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/dashboard"
	"github.com/sqlease/sqlease/sqlstore"
)

// addRun appends a finished run to the job's ledger, secs seconds ago.
func (s *site) addRun(job string, secs int, outcome, errText, holder string) {
	s.t.Helper()
	at := fmt.Sprintf("strftime('%%Y-%%m-%%d %%H:%%M:%%f','now','-%d seconds')", secs)
	fin := fmt.Sprintf("strftime('%%Y-%%m-%%d %%H:%%M:%%f','now','-%d seconds', '+0.25 seconds')", secs)
	if _, err := s.store.DB().Exec(`INSERT INTO sqlease_runs (job_id, job_name, scheduled_for, attempt, holder_id, epoch, started_at, finished_at, outcome, error)
		VALUES ((SELECT id FROM sqlease_jobs WHERE name = ?), ?, `+at+`, 1, ?, 1, `+at+`, `+fin+`, ?, ?)`, job, job, holder, outcome, errText); err != nil {
		s.t.Fatal(err)
	}
}

// TestOverviewSaysWhatIsBroken: a job whose newest runs failed is at the
// top of the overview with its last error, and its badge says failing on
// the jobs page and its own; a job that failed once and then succeeded is
// not; with nothing failing the overview says so. A succeeded run's output
// is not shown as an error.
func TestOverviewSaysWhatIsBroken(t *testing.T) {
	s := newSite(t, "", "127.0.0.1:0")
	ctx := context.Background()
	for _, name := range []string{"billing-sync", "nightly-report"} {
		if _, _, err := s.sched.Create(ctx, sqlease.Job{Name: name, Schedule: sqlease.Schedule{Every: time.Hour}}); err != nil {
			t.Fatal(err)
		}
	}
	s.setLease("lead", "node-a", time.Second, 5*time.Second)
	_, body, _ := s.get("/")
	if !strings.Contains(body, `id="verdict">No:`) {
		t.Fatalf("nothing failing, yet the overview does not say so:\n%s", body)
	}
	s.addRun("nightly-report", 60, "failed", "old failure", "node-a")
	s.addRun("nightly-report", 50, "succeeded", "", "node-a")
	for i := range 6 {
		s.addRun("billing-sync", 40-i, "failed", fmt.Sprintf("HTTP 502 <from> upstream #%d", i), "node-a")
	}
	_, body, _ = s.get("/")
	if !strings.Contains(body, `id="verdict">Yes:`) || !strings.Contains(body, "1 job failing") {
		t.Errorf("the overview does not lead with the failing job:\n%s", body)
	}
	failing := section(body, `id="failing-jobs"`, "</table>")
	if !strings.Contains(failing, `href="/ui/jobs/billing-sync"`) || !strings.Contains(failing, "HTTP 502 &lt;from&gt; upstream #5") ||
		!strings.Contains(failing, "5+") {
		t.Errorf("the failing jobs table lacks billing-sync, its last error (escaped) or its count:\n%s", failing)
	}
	if strings.Contains(failing, "nightly-report") {
		t.Errorf("a job whose last run succeeded is listed as failing:\n%s", failing)
	}
	if i, j := strings.Index(body, `id="health"`), strings.Index(body, `id="leader-h"`); i < 0 || j < 0 || i > j {
		t.Errorf("the health card is not first (at %d, the leader's at %d)", i, j)
	}
	_, body, _ = s.get("/ui/jobs")
	if !regexp.MustCompile(`billing-sync</a></th>\s*<td><span class="badge st-failing">failing</span>`).MatchString(body) {
		t.Errorf("the jobs page's badge for billing-sync is not failing:\n%s", body)
	}
	if !regexp.MustCompile(`nightly-report</a></th>\s*<td><span class="badge st-active">active</span>`).MatchString(body) {
		t.Errorf("the jobs page's badge for nightly-report is not active:\n%s", body)
	}
	_, body, _ = s.get("/ui/jobs?state=failing")
	if !strings.Contains(body, "billing-sync") || strings.Contains(body, "nightly-report</a>") {
		t.Errorf("the failing filter does not match the badges:\n%s", body)
	}
	_, body, _ = s.get("/ui/jobs/billing-sync")
	if !strings.Contains(body, `id="job-state">failing</span>`) {
		t.Errorf("the job page's badge is not failing:\n%s", body)
	}
	// A succeeded run's output: a disclosure outside the error's colour.
	if _, err := s.store.DB().Exec(`INSERT INTO sqlease_run_output (job_id, scheduled_for, attempt, finished_at, output)
		SELECT job_id, scheduled_for, attempt, finished_at, 'all good' FROM sqlease_runs WHERE job_name = 'nightly-report' AND outcome = 'succeeded'`); err != nil {
		t.Fatalf("keep an output for a succeeded run: %v", err)
	}
	_, body, _ = s.get("/ui/jobs/nightly-report")
	if !regexp.MustCompile(`<td class="runerr"><details class="output"><summary>Output</summary><pre><code>all good`).MatchString(body) {
		t.Errorf("a succeeded run's output is not a plain disclosure:\n%s", section(body, "<tbody>", "</tbody>"))
	}
}

// section is body from the first from up to the next to.
func section(body, from, to string) string {
	i := strings.Index(body, from)
	if i < 0 {
		return ""
	}
	j := strings.Index(body[i:], to)
	if j < 0 {
		return body[i:]
	}
	return body[i : i+j]
}

// setLease makes the lease name held by holder, renewed renewedAgo and
// expiring in expiresIn (negative: expired), in database time.
func (s *site) setLease(name, holder string, renewedAgo, expiresIn time.Duration) {
	s.t.Helper()
	if _, err := s.store.Acquire(context.Background(), name, holder, time.Minute); err != nil {
		s.t.Fatal(err)
	}
	sec := func(d time.Duration) string { return fmt.Sprintf("%+.3f seconds", d.Seconds()) }
	if _, err := s.store.DB().Exec(`UPDATE sqlease_leases SET renewed_at = strftime('%Y-%m-%d %H:%M:%f','now', ?),
		expires_at = strftime('%Y-%m-%d %H:%M:%f','now', ?) WHERE lease_name = ?`, sec(-renewedAgo), sec(expiresIn), name); err != nil {
		s.t.Fatal(err)
	}
}

// nodeRow is the overview's row of the node holder.
func nodeRow(t *testing.T, body, holder string) string {
	t.Helper()
	for _, row := range strings.Split(section(body, `<table class="nodes">`, "</table>"), "<tr") {
		if strings.HasPrefix(strings.TrimSpace(row[strings.Index(row, ">")+1:]), "<th scope=\"row\">"+holder) {
			return row
		}
	}
	t.Errorf("no row for %s on the overview:\n%s", holder, section(body, `<table class="nodes">`, "</table>"))
	return ""
}

// TestNodeStates: each node's state as the overview derives it from the
// leases and status records — ready with its version; not ready with the
// reason in words; unreachable when a lease it renews ran out without a
// release (a worker's) or its leadership was taken over, though its
// presence lease is still live; stopped when it released its presence; and
// alive again when it renewed something after the evidence.
func TestNodeStates(t *testing.T) {
	s := newSite(t, "", "127.0.0.1:0", func(c *dashboard.Config) {
		c.Readiness = func() (bool, string) { return true, "mode=follower holder_id=node-a durability=single" }
		c.Version = "v1.2.3"
		// The database has node-h's session, not node-g's.
		c.Sessions = func(context.Context) (func(string) bool, error) {
			return func(h string) bool { return h == "node-h" }, nil
		}
	})
	ctx := context.Background()
	record := func(holder, line string) {
		t.Helper()
		if err := s.store.RecordLeaseEvent(ctx, sqlstore.LeaseEvent{Lease: "node:" + holder, Event: sqlstore.EventNodeStatus,
			Holder: holder, Epoch: 1, Reason: line}, 0); err != nil {
			t.Fatal(err)
		}
	}
	live := func(name, holder string) { s.setLease(name, holder, 5*time.Second, 85*time.Second) }
	// node-b: ready, version v1.2.2.
	live("node:node-b", "node-b")
	record("node-b", "ready=true mode=follower holder_id=node-b version=v1.2.2")
	// node-c: a stale singleton.
	live("node:node-c", "node-c")
	record("node-c", "ready=false mode=follower holder_id=node-c reason=singleton_stale singleton_stale=ingest,export version=v1.2.3")
	// node-d: a claim worker whose lease ran out 1 s ago, unreleased.
	live("node:node-d", "node-d")
	s.setLease("worker:node-d", "node-d", 7*time.Second, -time.Second)
	// node-e: stopped gracefully (presence released right after a renewal).
	s.setLease("node:node-e", "node-e", 3*time.Second, -2900*time.Millisecond)
	// node-f: led epoch 1, taken over by node-b at epoch 2.
	s.setLease("node:node-f", "node-f", 20*time.Second, 70*time.Second)
	for _, e := range []sqlstore.LeaseEvent{{Lease: "lead", Event: sqlstore.EventAcquired, Holder: "node-f", Epoch: 1},
		{Lease: "lead", Event: sqlstore.EventTakenOver, Holder: "node-b", Epoch: 2, Reason: "the lease of node-f (epoch 1) expired without a release"}} {
		if err := s.store.RecordLeaseEvent(ctx, e, 0); err != nil {
			t.Fatal(err)
		}
	}
	live("lead", "node-b")
	// node-g and node-h keep a session (session=pg); node-g's is gone.
	live("node:node-g", "node-g")
	record("node-g", "ready=true mode=follower holder_id=node-g version=v1.2.3 session=pg")
	live("node:node-h", "node-h")
	record("node-h", "ready=true mode=follower holder_id=node-h version=v1.2.3 session=pg")

	_, body, _ := s.get("/")
	checks := []struct {
		holder, state string
		want          []string
	}{
		{"node-a", "ready", []string{"v1.2.3", "writes: single"}},
		{"node-b", "ready", []string{"v1.2.2", "leader"}},
		{"node-c", "not ready", []string{"singleton_stale", "singleton ingest, export missed its heartbeats"}},
		{"node-d", "unreachable", []string{"worker:node-d", "expired without a release"}},
		{"node-e", "stopped", nil},
		{"node-f", "unreachable", []string{"taken over by node-b"}},
		{"node-g", "unreachable", []string{"database session is gone"}},
		{"node-h", "ready", nil},
	}
	for _, c := range checks {
		row := nodeRow(t, body, c.holder)
		if !strings.Contains(row, `">`+c.state+`</span>`) {
			t.Errorf("%s is not %s:\n%s", c.holder, c.state, row)
		}
		for _, w := range c.want {
			if !strings.Contains(row, w) {
				t.Errorf("%s's row lacks %q:\n%s", c.holder, w, row)
			}
		}
	}
	if !strings.Contains(body, "3 nodes unreachable") || !strings.Contains(body, "1 node not ready") {
		t.Errorf("the verdict does not count the nodes:\n%s", section(body, `id="health"`, "</section>"))
	}
	// Trouble first: the unreachable nodes, then the one not ready.
	order := regexp.MustCompile(`<th scope="row">(node-[a-h])`).FindAllStringSubmatch(section(body, `<table class="nodes">`, "</table>"), -1)
	var got []string
	for _, m := range order {
		got = append(got, m[1])
	}
	if strings.Join(got, ",") != "node-d,node-f,node-g,node-c,node-a,node-b,node-h,node-e" {
		t.Errorf("node order %v, want the unreachable, then not ready, then ready, then stopped", got)
	}
	// node-i ran singleton ingest, whose lease ran out unreleased; node-b
	// takes it over: the row no longer names node-i, which stays
	// unreachable (the page remembers the evidence) until it shows a later
	// sign of life.
	live("node:node-i", "node-i")
	s.setLease("singleton:ingest", "node-i", 7*time.Second, -time.Second)
	_, body, _ = s.get("/")
	if row := nodeRow(t, body, "node-i"); !strings.Contains(row, ">unreachable</span>") {
		t.Errorf("node-i's singleton lease ran out, yet:\n%s", row)
	}
	if _, err := s.store.DB().Exec(`DELETE FROM sqlease_leases WHERE lease_name = 'singleton:ingest'`); err != nil {
		t.Fatal(err)
	}
	s.setLease("singleton:ingest", "node-b", 0, 6*time.Second)
	_, body, _ = s.get("/")
	if row := nodeRow(t, body, "node-i"); !strings.Contains(row, ">unreachable</span>") || !strings.Contains(row, "singleton:ingest") {
		t.Errorf("node-i looks alive again once its singleton was taken over:\n%s", row)
	}
	// It renews its presence just now: a sign of life after the evidence.
	if _, err := s.store.DB().Exec(`UPDATE sqlease_leases SET renewed_at = strftime('%Y-%m-%d %H:%M:%f','now'),
		expires_at = strftime('%Y-%m-%d %H:%M:%f','now','+90 seconds') WHERE lease_name = 'node:node-i'`); err != nil {
		t.Fatal(err)
	}
	_, body, _ = s.get("/")
	if row := nodeRow(t, body, "node-i"); strings.Contains(row, ">unreachable</span>") {
		t.Errorf("node-i renewed its presence after the evidence and is still unreachable:\n%s", row)
	}
	// node-d's worker renews again: alive.
	s.setLease("worker:node-d", "node-d", 0, 6*time.Second)
	_, body, _ = s.get("/")
	if row := nodeRow(t, body, "node-d"); strings.Contains(row, "unreachable") {
		t.Errorf("node-d renewed its lease and is still unreachable:\n%s", row)
	}
}
