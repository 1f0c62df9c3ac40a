package dashboard_test

import (
	"context"
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
	if _, err := s.store.DB().Exec(`INSERT INTO sqlease_runs (job_id, job_name, scheduled_for, attempt, holder_id, epoch, started_at, finished_at, outcome, error)
		VALUES ((SELECT id FROM sqlease_jobs WHERE name = 'flaky'), 'flaky', ?, 1, 'h', 1, ?, ?, 'skipped', 'breaker open')`, at, at, at); err != nil {
		t.Fatal(err)
	}
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
