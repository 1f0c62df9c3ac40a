package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
)

// TestJobStateShown: the job page shows a pause's reason, a job's breaker
// (its state, since when, the failures counted) and runs skipped by it; the
// jobs page marks an open breaker and carries the reason, escaped.
func TestJobStateShown(t *testing.T) {
	s := newSite(t, "", "127.0.0.1:0")
	ctx := context.Background()
	if _, _, err := s.sched.Create(ctx, sqlease.Job{Name: "flaky", Schedule: sqlease.Schedule{Every: time.Hour},
		Breaker: sqlease.Breaker{Failures: 3, CoolDown: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	code, body, _ := s.get("/ui/jobs/flaky")
	if code != 200 || !strings.Contains(body, `<dd id="breaker">closed`) || strings.Contains(body, `id="job-breaker"`) {
		t.Fatalf("closed breaker: %d\n%s", code, body)
	}
	at := "2026-01-01 00:00:00.000"
	if _, err := s.store.DB().Exec(`UPDATE sqlease_jobs SET breaker_count = 3, breaker_opened_at = strftime('%Y-%m-%d %H:%M:%f','now'),
		breaker_changed_at = strftime('%Y-%m-%d %H:%M:%f','now') WHERE name = 'flaky'`); err != nil {
		t.Fatal(err)
	}
	s.finishedRun("flaky", at, "skipped", "breaker open", "")
	if _, err := s.sched.PauseWithReason(ctx, "flaky", "vendor <outage>"); err != nil {
		t.Fatal(err)
	}
	_, body, _ = s.get("/ui/jobs/flaky")
	for _, want := range []string{`id="job-breaker">breaker open`, `<dd id="breaker">open since`, "3 of 3 failed occurrences in a row",
		`<span class="badge out-skipped">skipped</span>`, "breaker open", `id="pause-reason">Paused: vendor &lt;outage&gt;`} {
		if !strings.Contains(body, want) {
			t.Errorf("job page lacks %q:\n%s", want, body)
		}
	}
	_, body, _ = s.get("/ui/jobs")
	for _, want := range []string{`title="vendor &lt;outage&gt;">paused`, `<span class="badge br-open">breaker open</span>`} {
		if !strings.Contains(body, want) {
			t.Errorf("jobs page lacks %q:\n%s", want, body)
		}
	}
}

// TestPauseWithReasonAndOverlapShown: the pause confirmation takes a
// reason, checked as the API checks it (too long: 400, nothing paused),
// shown on the job page; the page says the job's overlap policy.
func TestPauseWithReasonAndOverlapShown(t *testing.T) {
	s := newSite(t, "", "127.0.0.1:0")
	s.job("payroll", false)
	ctx := context.Background()
	if _, _, err := s.sched.Create(ctx, sqlease.Job{Name: "poll", Schedule: sqlease.Schedule{Every: time.Minute, Overlap: sqlease.OverlapSkip}}); err != nil {
		t.Fatal(err)
	}
	code, body, _ := s.get("/ui/jobs/payroll/confirm?action=pause")
	m := csrfRe.FindStringSubmatch(body)
	if code != 200 || m == nil || !strings.Contains(body, `name="reason"`) {
		t.Fatalf("pause confirmation: %d, reason field %v", code, strings.Contains(body, `name="reason"`))
	}
	if code, _, _ := s.get("/ui/jobs/payroll/confirm?action=trigger"); code != 200 {
		t.Fatalf("trigger confirmation: %d", code)
	} else if _, body, _ := s.get("/ui/jobs/payroll/confirm?action=trigger"); strings.Contains(body, `name="reason"`) {
		t.Error("the trigger confirmation asks for a reason")
	}
	if code, _, _ := s.post("/ui/jobs/payroll/pause", url.Values{"csrf": {m[1]}, "reason": {strings.Repeat("x", 513)}}); code != 400 {
		t.Fatalf("a reason over 512 bytes: %d, want 400", code)
	}
	if j, _ := s.sched.Job(ctx, "payroll"); j.Paused {
		t.Fatal("a refused pause paused the job")
	}
	if code, _, _ := s.post("/ui/jobs/payroll/pause", url.Values{"csrf": {m[1]}, "reason": {" vendor <outage> "}}); code != http.StatusSeeOther {
		t.Fatalf("the confirmed pause: %d", code)
	}
	if j, _ := s.sched.Job(ctx, "payroll"); !j.Paused || j.PauseReason != "vendor <outage>" {
		t.Fatalf("after the pause: paused %v reason %q", j.Paused, j.PauseReason)
	}
	if _, body, _ := s.get("/ui/jobs/payroll"); !strings.Contains(body, `id="pause-reason">Paused: vendor &lt;outage&gt;`) || !strings.Contains(body, `id="overlap">wait<`) {
		t.Errorf("job page lacks the reason or the overlap")
	}
	if _, body, _ := s.get("/ui/jobs/poll"); !strings.Contains(body, `id="overlap">skip: an occurrence due while one runs is recorded as skipped<`) {
		t.Errorf("job page of a skip job does not say so")
	}
}

// TestAllowShown: the job page of an overlap allow job says so, with its
// bound when it has one.
func TestAllowShown(t *testing.T) {
	s := newSite(t, "", "127.0.0.1:0")
	ctx := context.Background()
	for name, bound := range map[string]int{"bounded": 2, "free": 0} {
		if _, _, err := s.sched.Create(ctx, sqlease.Job{Name: name, Schedule: sqlease.Schedule{Every: time.Hour, Overlap: sqlease.OverlapAllow, MaxConcurrent: bound}}); err != nil {
			t.Fatal(err)
		}
	}
	for page, want := range map[string]string{
		"/ui/jobs/bounded": `id="overlap">allow, at most 2 at once<`,
		"/ui/jobs/free":    `id="overlap">allow: occurrences run at once, without a bound<`,
	} {
		if _, body, _ := s.get(page); !strings.Contains(body, want) {
			i := strings.Index(body, `id="overlap"`)
			t.Errorf("%s lacks %q: %.200s", page, want, body[max(i, 0):])
		}
	}
}

// TestRunCheckpointShown: a run's checkpoint is on the job page, under its
// error and output, escaped.
func TestRunCheckpointShown(t *testing.T) {
	s := newSite(t, "", "127.0.0.1:0")
	s.job("resumable", false)
	at := "2026-01-01 00:00:00.000"
	if _, err := s.store.DB().Exec(`INSERT INTO sqlease_runs (job_id, job_name, scheduled_for, attempt, holder_id, epoch, started_at, finished_at, outcome, error)
		VALUES ((SELECT id FROM sqlease_jobs WHERE name = 'resumable'), 'resumable', ?, 1, 'h', 1, ?, NULL, 'running', NULL)`, at, at); err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.DB().Exec(`INSERT INTO sqlease_run_checkpoints (job_id, scheduled_for, attempt, saved_at, checkpoint)
		VALUES ((SELECT id FROM sqlease_jobs WHERE name = 'resumable'), ?, 1, ?, ?)`, at, at, `{"cursor":"<b>1200</b>"}`); err != nil {
		t.Fatal(err)
	}
	code, body, _ := s.get("/ui/jobs/resumable")
	if code != 200 {
		t.Fatalf("job page: %d", code)
	}
	if !strings.Contains(body, "<summary>Checkpoint</summary><pre><code>{&#34;cursor&#34;:&#34;&lt;b&gt;1200&lt;/b&gt;&#34;}") {
		t.Errorf("job page lacks the run's escaped checkpoint:\n%s", body)
	}
}
