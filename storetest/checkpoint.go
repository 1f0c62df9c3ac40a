package storetest

import (
	"database/sql"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// testRunCheckpoint: a run's checkpoint (Store.SaveCheckpoint) is written
// only while the attempt holds its job's lock: a reclaimed lock, a finished
// run or a deposed leader's fenced transaction writes nothing and returns
// ErrLeaseLost (ErrFenceFailed); a rolled back fenced transaction keeps
// none. A save replaces the attempt's previous one; the runs listing shows
// each attempt's own; the next attempt of the occurrence reads the latest
// an earlier attempt saved (LatestCheckpoint), none on a first attempt.
// Invalid values are refused; checkpoints go with a deleted job and with
// pruned runs.
func testRunCheckpoint(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	if s.Dialect().Jobs.Checkpoints.Save == "" {
		t.Fatalf("dialect %s keeps no run checkpoints (JobQueries.Checkpoints.Save is empty)", s.Dialect().Name)
	}
	runsOf := func(job string) []sqlease.Run { t.Helper(); return jobRuns(t, s, job) }
	latest := func(r sqlease.Run, attempt int) (string, int) {
		t.Helper()
		v, from, err := s.LatestCheckpoint(ctx, r.JobID, r.ScheduledFor, attempt)
		if err != nil {
			t.Fatalf("LatestCheckpoint(attempt %d): %v", attempt, err)
		}
		return string(v), from
	}

	// Saved, replaced, read back with the run; a first attempt has none
	// to resume from, the second gets the last one the first saved.
	l, r := startedRun(t, s, "ckpt", "w")
	if v, _ := latest(r, 1); v != "" {
		t.Errorf("a first attempt reads checkpoint %s, want none", v)
	}
	if got := runsOf("ckpt")[0].Checkpoint; got != nil {
		t.Errorf("a run that saved none lists checkpoint %s", got)
	}
	for _, v := range []string{`{"cursor": 1}`, `{"cursor": 2, "note": "é \u0000 \ud83d\ude00"}`} {
		if err := s.SaveCheckpoint(ctx, nil, l, r, json.RawMessage(v)); err != nil {
			t.Fatalf("SaveCheckpoint(%s): %v", v, err)
		}
	}
	want := `{"cursor": 2, "note": "é \u0000 \ud83d\ude00"}`
	if got := string(runsOf("ckpt")[0].Checkpoint); got != want {
		t.Errorf("listed checkpoint %s, want the last saved %s", got, want)
	}
	if v, from := latest(r, 2); v != want || from != 1 {
		t.Errorf("attempt 2 resumes from %s (attempt %d), want %s of attempt 1", v, from, want)
	}

	// Invalid values: refused, nothing changed.
	for _, bad := range []string{"", " ", `{"a":`, "{\"a\": \"\xff\"}", `"` + strings.Repeat("x", sqlstore.MaxCheckpointBytes) + `"`, "1 2"} {
		if err := s.SaveCheckpoint(ctx, nil, l, r, json.RawMessage(bad)); !errors.Is(err, sqlease.ErrInvalidConfig) {
			t.Errorf("SaveCheckpoint(%.20q) = %v, want ErrInvalidConfig", bad, err)
		}
	}

	// A lost job lock (a reclaim bumps its epoch): refused, nothing
	// written.
	stale := l
	stale.Epoch++
	if err := s.SaveCheckpoint(ctx, nil, stale, r, json.RawMessage(`{"cursor": "stale"}`)); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Errorf("SaveCheckpoint under a lost lock = %v, want ErrLeaseLost", err)
	}
	other := l
	other.Holder = "another worker"
	if err := s.SaveCheckpoint(ctx, nil, other, r, json.RawMessage(`{"cursor": "other"}`)); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Errorf("SaveCheckpoint under another holder = %v, want ErrLeaseLost", err)
	}
	if got := string(runsOf("ckpt")[0].Checkpoint); got != want {
		t.Errorf("after refused saves the checkpoint is %s, want %s", got, want)
	}

	// The attempt fails and is retried: attempt 2 resumes from attempt 1's
	// checkpoint; attempt 3, after an attempt 2 that saved nothing, still
	// from attempt 1's; once attempt 2 saves, from attempt 2's.
	failed := sqlstore.Finish{Outcome: sqlease.OutcomeFailed, Error: "boom", Next: r.ScheduledFor, Attempt: 1}
	if err := s.FinishRun(ctx, nil, l, r, failed); err != nil {
		t.Fatalf("FinishRun failed for a retry: %v", err)
	}
	if err := s.SaveCheckpoint(ctx, nil, l, r, json.RawMessage(`{"after": "finish"}`)); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Errorf("SaveCheckpoint after the run finished = %v, want ErrLeaseLost", err)
	}
	l2, r2 := restart(t, s, "ckpt", "w2", 2)
	if v, from := latest(r2, r2.Attempt); v != want || from != 1 {
		t.Errorf("attempt 2 resumes from %s (attempt %d), want %s of attempt 1", v, from, want)
	}
	failed.Attempt = 2
	if err := s.FinishRun(ctx, nil, l2, r2, failed); err != nil {
		t.Fatal(err)
	}
	l3, r3 := restart(t, s, "ckpt", "w3", 3)
	if v, from := latest(r3, r3.Attempt); v != want || from != 1 {
		t.Errorf("attempt 3 after an attempt 2 without checkpoint resumes from %s (attempt %d), want attempt 1's", v, from)
	}
	if err := s.SaveCheckpoint(ctx, nil, l3, r3, json.RawMessage(`[3]`)); err != nil {
		t.Fatal(err)
	}
	if v, from := latest(r3, 4); v != `[3]` || from != 3 {
		t.Errorf("attempt 4 would resume from %s (attempt %d), want [3] of attempt 3", v, from)
	}
	runs := runsOf("ckpt")
	if len(runs) != 3 || string(runs[0].Checkpoint) != `[3]` || runs[1].Checkpoint != nil || string(runs[2].Checkpoint) != want {
		var got []string
		for _, r := range runs {
			got = append(got, string(r.Checkpoint))
		}
		t.Errorf("listed checkpoints, newest attempt first: %q; want [3], none, attempt 1's", got)
	}

	// A deposed leader: its fenced save is refused and writes nothing; the
	// new leader's save goes through. A rolled back fenced transaction
	// keeps none.
	a := mustAcquire(t, s, leaseName, "holder-a", shortTTL)
	l, r = startedRun(t, s, "ckpt-deposed", "w")
	waitExpired(t, s, leaseName)
	b := mustAcquire(t, s, leaseName, "holder-b", longTTL)
	err := s.Fenced(ctx, a.Token(), func(tx *sql.Tx) error {
		return s.SaveCheckpoint(ctx, tx, l, r, json.RawMessage(`"deposed"`))
	})
	if !errors.Is(err, sqlease.ErrFenceFailed) || !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Errorf("the deposed leader's fenced save = %v, want ErrFenceFailed", err)
	}
	errLater := errors.New("storetest: a later write of the transaction failed")
	err = s.Fenced(ctx, b.Token(), func(tx *sql.Tx) error {
		if err := s.SaveCheckpoint(ctx, tx, l, r, json.RawMessage(`"rolled back"`)); err != nil {
			return err
		}
		return errLater
	})
	if !errors.Is(err, errLater) {
		t.Fatalf("fenced save then failure = %v", err)
	}
	if got := runsOf("ckpt-deposed")[0].Checkpoint; got != nil {
		t.Errorf("a refused or rolled back save left checkpoint %s", got)
	}
	if err := s.Fenced(ctx, b.Token(), func(tx *sql.Tx) error {
		return s.SaveCheckpoint(ctx, tx, l, r, json.RawMessage(`"leader"`))
	}); err != nil {
		t.Fatalf("the leader's fenced save: %v", err)
	}
	if got := string(runsOf("ckpt-deposed")[0].Checkpoint); got != `"leader"` {
		t.Errorf("checkpoint %s, want the leader's", got)
	}

	// Deleting a job deletes its checkpoints; retention prunes the rest.
	goneWithJobAndRuns(t, s, "checkpoint", "ckpt-deposed", l.JobID, checkpointRows)
}

// restart claims job again (a retry of its due occurrence) as holder and
// starts the attempt it is due for, which must be attempt.
func restart(t *testing.T, s *sqlstore.Store, job, holder string, attempt int) (sqlstore.Lock, sqlease.Run) {
	t.Helper()
	ctx := t.Context()
	claimed, err := s.ClaimDue(ctx, holder, 100)
	if err != nil {
		t.Fatalf("claim %s: %v", job, err)
	}
	for _, c := range claimed {
		if c.Name != job {
			continue
		}
		if c.Attempt+1 != attempt {
			t.Fatalf("claimed %s with %d attempts started, want %d", job, c.Attempt, attempt-1)
		}
		r, err := s.StartRun(ctx, nil, c.Lock, c.Name, c.NextRunAt, attempt, c.Lock.Epoch)
		if err != nil {
			t.Fatalf("start attempt %d of %s: %v", attempt, job, err)
		}
		return c.Lock, r
	}
	t.Fatalf("job %s not claimed again (claimed %d others)", job, len(claimed))
	return sqlstore.Lock{}, sqlease.Run{}
}

var deleteFrom = regexp.MustCompile(`^DELETE FROM\s+(\S+)\s+WHERE`)

// checkpointRows counts the checkpoint rows of a job (all jobs: -1), read
// from the table Checkpoints.DeleteJob deletes from.
func checkpointRows(t *testing.T, s *sqlstore.Store, jobID int64) int {
	t.Helper()
	return jobRows(t, s, deleteFrom, "Checkpoints.DeleteJob", s.Dialect().Jobs.Checkpoints.DeleteJob, jobID)
}

// goneWithJobAndRuns checks that the rows a run keeps in a table of its own
// (what: output, checkpoint; counted by rows, of one job or of all for -1)
// go with their job when it is deleted (job, whose id is jobID, has one)
// and with their runs when retention prunes them.
func goneWithJobAndRuns(t *testing.T, s *sqlstore.Store, what, job string, jobID int64, rows func(*testing.T, *sqlstore.Store, int64) int) {
	t.Helper()
	if n := rows(t, s, jobID); n != 1 {
		t.Fatalf("%d %s rows of job %d before its delete, want 1", n, what, jobID)
	}
	if err := s.DeleteJob(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	if n := rows(t, s, jobID); n != 0 {
		t.Errorf("%d %s rows of the deleted job, want 0", n, what)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := s.PruneRuns(t.Context(), 10*time.Millisecond); err != nil {
		t.Fatalf("PruneRuns: %v", err)
	}
	if n := rows(t, s, -1); n != 0 {
		t.Errorf("%d %s rows after the runs were pruned, want 0", n, what)
	}
}

// jobRows counts the rows of a job (all jobs: -1) in the table that re
// finds in stmt, the dialect's statement named field.
func jobRows(t *testing.T, s *sqlstore.Store, re *regexp.Regexp, field, stmt string, jobID int64) int {
	t.Helper()
	m := re.FindStringSubmatch(stmt)
	if m == nil {
		t.Fatalf("storetest: no table in %s %q", field, stmt)
	}
	ph := map[string]string{"postgres": "$1", "sqlserver": "@p1"}[s.Dialect().Name]
	if ph == "" {
		ph = "?"
	}
	q, args := `SELECT count(*) FROM `+m[1]+` WHERE job_id = `+ph, []any{jobID}
	if jobID == -1 {
		q, args = `SELECT count(*) FROM `+m[1], nil
	}
	var n int
	if err := s.DB().QueryRowContext(t.Context(), q, args...).Scan(&n); err != nil {
		t.Fatalf("count the rows of %s: %v", m[1], err)
	}
	return n
}
