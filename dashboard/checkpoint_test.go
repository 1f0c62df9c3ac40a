package dashboard_test

import (
	"strings"
	"testing"
)

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
