package storetest

import (
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// The run-ledger scenarios of fault issue 10, item 4 ("one run's trouble
// stays that run's"): a finish that cannot be recorded fails neither the
// fence nor the other runs of its statement, and a deleted job leaves no run
// running forever.

// startedRun inserts a one-off job due now, claims it for holder and starts
// attempt 1 of its occurrence.
func startedRun(t *testing.T, s *sqlstore.Store, name, holder string) (sqlstore.Lock, sqlease.Run) {
	t.Helper()
	ctx := t.Context()
	if _, created, err := s.InsertJob(ctx, sqlstore.StoredJob{Job: sqlease.Job{Name: name, MissedRuns: sqlease.RunOnce,
		Retry: sqlease.Retry{MaxAttempts: 1}, LockTimeout: time.Minute}, SpecHash: name}, dbNow(t, s).Add(-time.Second)); err != nil || !created {
		t.Fatalf("insert job %s: created=%v %v", name, created, err)
	}
	claimed, err := s.ClaimDue(ctx, holder, 100)
	if err != nil {
		t.Fatalf("claim %s: %v", name, err)
	}
	for _, c := range claimed {
		if c.Name == name {
			r, err := s.StartRun(ctx, nil, c.Lock, c.Name, c.NextRunAt, 1, c.Lock.Epoch)
			if err != nil {
				t.Fatalf("start run of %s: %v", name, err)
			}
			return c.Lock, r
		}
	}
	t.Fatalf("job %s not claimed (claimed %d others)", name, len(claimed))
	return sqlstore.Lock{}, sqlease.Run{}
}

// runRow is a run row read by job id, which Store.Runs cannot do once the
// job is deleted (it finds runs by the job's name).
type runRow struct {
	outcome  string
	err      sql.NullString
	finished bool
}

var insertInto = regexp.MustCompile(`^INSERT INTO\s+(\S+)\s*\(`)

func runsOf(t *testing.T, s *sqlstore.Store, jobID int64) []runRow {
	t.Helper()
	m := insertInto.FindStringSubmatch(s.Dialect().Jobs.InsertRun)
	if m == nil {
		t.Fatalf("storetest: no runs table in InsertRun %q", s.Dialect().Jobs.InsertRun)
	}
	ph := map[string]string{"postgres": "$1", "sqlserver": "@p1"}[s.Dialect().Name]
	if ph == "" {
		ph = "?"
	}
	rows, err := s.DB().QueryContext(t.Context(), `SELECT outcome, error, finished_at FROM `+m[1]+` WHERE job_id = `+ph+` ORDER BY attempt`, jobID)
	if err != nil {
		t.Fatalf("read runs of job %d: %v", jobID, err)
	}
	defer rows.Close()
	var out []runRow
	for rows.Next() {
		var r runRow
		var fin any
		if err := rows.Scan(&r.outcome, &r.err, &fin); err != nil {
			t.Fatalf("read runs of job %d: %v", jobID, err)
		}
		r.finished = fin != nil
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read runs of job %d: %v", jobID, err)
	}
	return out
}

// testRunErrorText: a run's error text is stored as sqlstore.CleanText
// makes it, whatever bytes the action produced — NUL (PostgreSQL refuses it
// in text), bytes that are not UTF-8 (PostgreSQL and MySQL refuse them), far
// more than MaxTextBytes — through FinishRun and, where the dialect has it,
// FinishRuns, where such a run must not fail the other runs of the statement.
func testRunErrorText(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	texts := []string{
		"plain error",
		"stderr: before\x00after",
		"body: \xff\xfe\xc3(\xe2\x82 end",
		"HTTP 500: " + strings.Repeat("é\x00", 3000),
	}
	check := func(name, want string) {
		t.Helper()
		runs, err := s.Runs(ctx, name, 10)
		if err != nil || len(runs) != 1 {
			t.Fatalf("runs of %s: %+v %v", name, runs, err)
		}
		got := runs[0]
		if got.Outcome != sqlease.OutcomeFailed {
			t.Errorf("%s: outcome %s, want failed", name, got.Outcome)
		}
		if got.Error != sqlstore.CleanText(want) {
			t.Errorf("%s: stored error %q (%d bytes), want CleanText of the given one", name, trim(got.Error), len(got.Error))
		}
		if strings.IndexByte(got.Error, 0) >= 0 || !utf8.ValidString(got.Error) || len(got.Error) > sqlstore.MaxTextBytes {
			t.Errorf("%s: stored error of %d bytes keeps a NUL or invalid UTF-8 or exceeds MaxTextBytes", name, len(got.Error))
		}
	}
	for i, text := range texts {
		name := fmt.Sprintf("text-one-%d", i)
		l, r := startedRun(t, s, name, "w")
		if err := s.FinishRun(ctx, nil, l, r, sqlstore.Finish{Outcome: sqlease.OutcomeFailed, Error: text}); err != nil {
			t.Fatalf("FinishRun with error text %q: %v", trim(text), err)
		}
		check(name, text)
	}
	if !s.Batched() {
		return
	}
	reqs := make([]sqlstore.FinishReq, len(texts))
	for i, text := range texts {
		l, r := startedRun(t, s, fmt.Sprintf("text-batch-%d", i), "w")
		reqs[i] = sqlstore.FinishReq{Lock: l, Run: r, Finish: sqlstore.Finish{Outcome: sqlease.OutcomeFailed, Error: text}}
	}
	done, err := s.FinishRuns(ctx, nil, reqs)
	if err != nil {
		t.Fatalf("FinishRuns with odd error texts: %v", err)
	}
	for i, text := range texts {
		if !done[i] {
			t.Errorf("FinishRuns left run %d undone", i)
		}
		check(fmt.Sprintf("text-batch-%d", i), text)
	}
}

// testDeleteWhileRunning: deleting a job closes its run in flight
// (abandoned, "job deleted while running") in the delete's transaction. The
// executor's own finish then changes nothing and says so with the job
// lock's ErrLeaseLost — never ErrFenceFailed, also inside a fenced
// transaction, whose lease stays as it was: a deleted job must not cost the
// leader its term.
func testDeleteWhileRunning(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	a := mustAcquire(t, s, leaseName, "holder-a", longTTL)
	l, r := startedRun(t, s, "doomed", "w")
	if err := s.DeleteJob(ctx, "doomed"); err != nil {
		t.Fatalf("DeleteJob of a running job: %v", err)
	}
	want := []runRow{{outcome: string(sqlease.OutcomeAbandoned), err: sql.NullString{String: "job deleted while running", Valid: true}, finished: true}}
	if got := runsOf(t, s, l.JobID); len(got) != 1 || got[0] != want[0] {
		t.Fatalf("runs of the deleted job: %+v, want %+v", got, want)
	}

	fin := sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}
	err := s.FinishRun(ctx, nil, l, r, fin)
	if !errors.Is(err, sqlease.ErrLeaseLost) || errors.Is(err, sqlease.ErrFenceFailed) {
		t.Errorf("FinishRun of the deleted job's run = %v, want the job lock's ErrLeaseLost, not ErrFenceFailed", err)
	}
	err = s.Fenced(ctx, a.Token(), func(tx *sql.Tx) error { return s.FinishRun(ctx, tx, l, r, fin) })
	if !errors.Is(err, sqlease.ErrLeaseLost) || errors.Is(err, sqlease.ErrFenceFailed) {
		t.Errorf("fenced FinishRun of the deleted job's run = %v, want the job lock's ErrLeaseLost, not ErrFenceFailed", err)
	}
	if s.Batched() {
		err = s.Fenced(ctx, a.Token(), func(tx *sql.Tx) error {
			done, err := s.FinishRuns(ctx, tx, []sqlstore.FinishReq{{Lock: l, Run: r, Finish: fin}})
			if err == nil && done[0] {
				err = errors.New("FinishRuns reports the deleted job's run finished")
			}
			return err
		})
		if err != nil {
			t.Errorf("fenced FinishRuns of the deleted job's run: %v, want nothing done and no error", err)
		}
	}
	if got := runsOf(t, s, l.JobID); len(got) != 1 || got[0] != want[0] {
		t.Errorf("the late finish changed the deleted job's run: %+v, want %+v", got, want)
	}
	sameRow(t, "lease after finishes of a deleted job", a, mustLease(t, s, leaseName))
	if err := s.Fenced(ctx, a.Token(), func(*sql.Tx) error { return nil }); err != nil {
		t.Errorf("a fenced write after them: %v", err)
	}
}

// testDeleteRacingStart: a run started in a transaction that commits while
// the delete of its job waits for it is closed by the delete too. Closing
// the runs before deleting the row missed it (PostgreSQL, MariaDB): the
// start's run was not yet committed when the runs were closed, the delete
// then waited for the start's row lock, and the run stayed running forever.
func testDeleteRacingStart(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	if _, _, err := s.InsertJob(ctx, sqlstore.StoredJob{Job: sqlease.Job{Name: "racing", MissedRuns: sqlease.RunOnce,
		Retry: sqlease.Retry{MaxAttempts: 1}, LockTimeout: time.Minute}, SpecHash: "racing"}, dbNow(t, s).Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	claimed, err := s.ClaimDue(ctx, "w", 10)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v, %d jobs", err, len(claimed))
	}
	c := claimed[0]
	tx, err := s.DB().BeginTx(ctx, s.Dialect().TxOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := s.StartRun(ctx, tx, c.Lock, c.Name, c.NextRunAt, 1, c.Lock.Epoch); err != nil {
		t.Fatalf("start in a transaction: %v", err)
	}
	deleted := make(chan error, 1)
	go func() { deleted <- s.DeleteJob(ctx, "racing") }()
	// Give the delete time to reach the start's locks; if it is slower,
	// the start commits first and the scenario is the plain one.
	select {
	case err := <-deleted:
		t.Fatalf("DeleteJob returned (%v) while a start held the job", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit the start: %v", err)
	}
	if err := waitErr(t, deleted, "DeleteJob"); err != nil {
		t.Fatalf("DeleteJob: %v", err)
	}
	got := runsOf(t, s, c.ID)
	if len(got) != 1 || got[0].outcome != string(sqlease.OutcomeAbandoned) || !got[0].finished {
		t.Fatalf("runs of the job deleted while its start committed: %+v, want one abandoned", got)
	}
}

func trim(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
