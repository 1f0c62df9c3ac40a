package mysql_test

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// A batch start holds its job's lock until its transaction commits: a
// worker that would reclaim the job (its lock gone stale meanwhile) cannot
// take it in between; it takes the other stale job at once. Claims tell a
// reclaim from a first claim, and read a job's attempt from the ledger.
func TestBatchStartHoldsJobLock(t *testing.T) {
	ctx := t.Context()
	st := newStore(t)
	if !st.Batched() {
		t.Fatal("the MySQL store does not batch")
	}
	admin, err := scheduler.New(scheduler.Config{Store: st, Holder: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if _, _, err := admin.Create(ctx, sqlease.Job{Name: name, LockTimeout: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	claimed, err := st.ClaimDue(ctx, "w1", 2)
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claim: %d jobs, %v", len(claimed), err)
	}
	for _, c := range claimed {
		if c.Reclaimed {
			t.Errorf("the first claim of %s counts as a reclaim", c.Name)
		}
	}
	a, b := claimed[0], claimed[1]
	tx, err := st.DB().BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	ok, err := st.StartRuns(ctx, tx, []sqlstore.StartReq{{Lock: a.Lock, Job: a.Name, ScheduledFor: a.NextRunAt, Attempt: 1}})
	if err != nil || !ok[0] {
		t.Fatalf("batch start: %v, %v", ok, err)
	}
	// Both locks go stale. The wait is a statement of the transaction: the
	// server ends one left idle for a second (idleTransactionLimit).
	if _, err := tx.ExecContext(ctx, `DO SLEEP(1.1)`); err != nil {
		t.Fatal(err)
	}

	// b, in flight and not locked by anyone, is taken over at once; a,
	// whose start has not committed, is left alone.
	again, err := st.ClaimDue(ctx, "w2", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || again[0].ID != b.ID || !again[0].Reclaimed {
		t.Fatalf("reclaim during a's start: %v, want b alone, as a reclaim", names(again))
	}
	// b's lock holder's finish is refused; it did not wait for a claim.
	done, err := st.FinishRuns(ctx, nil, []sqlstore.FinishReq{{Lock: b.Lock, Run: sqlease.Run{JobID: b.ID, Job: b.Name, ScheduledFor: b.NextRunAt, Attempt: 1},
		Finish: sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}}})
	if err != nil || done[0] {
		t.Fatalf("finish of b under its lost lock: %v, %v; want refused", done, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	again, err = st.ClaimDue(ctx, "w2", 2)
	if err != nil || len(again) != 1 || again[0].ID != a.ID || !again[0].Reclaimed || again[0].Attempt != 1 {
		t.Fatalf("reclaim after a's start committed: %v, %v; want a, a reclaim, its attempt 1 from the ledger", names(again), err)
	}
}

func names(cs []sqlstore.Claimed) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// jobRow and runRow are what a finish writes to a job and to its run.
type jobRow struct {
	lockedBy, lockedAt, nextRunAt, notBefore, lastRunAt sql.NullString
	lockEpoch, lockLeaseEpoch                           int64
	attempt                                             int
	lastModifiedAt                                      string
}

type runRow struct {
	outcome            string
	errText, finished  sql.NullString
	output, outputTime sql.NullString
}

// fmtTime formats a datetime column as the batch finish test compares
// them.
func fmtTime(col string) string { return `DATE_FORMAT(` + col + `, '%Y-%m-%d %H:%i:%s.%f')` }

// A batch finish of several runs (FinishJSON's statements on MySQL) writes
// what FinishRun writes for each run whose lock is held, and nothing for one
// whose lock is lost: to another holder and epoch, to a new epoch of the
// same holder, or with another holder under the same epoch.
func TestBatchFinishSemantics(t *testing.T) {
	ctx := t.Context()
	st, prefix := newStoreWithPrefix(t)
	db := st.DB()
	now, err := st.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"lost-both", "lost-epoch", "lost-holder", "oneoff", "retry", "failed", "output", "big-output"}
	for _, name := range names {
		if _, created, err := st.InsertJob(ctx, sqlstore.StoredJob{Job: sqlease.Job{Name: name, MissedRuns: sqlease.RunOnce,
			Retry: sqlease.Retry{MaxAttempts: 3}, LockTimeout: time.Minute}, SpecHash: name}, now.Add(-time.Second)); err != nil || !created {
			t.Fatalf("insert job %s: created=%v %v", name, created, err)
		}
	}
	claimed, err := st.ClaimDue(ctx, "w1", len(names))
	if err != nil || len(claimed) != len(names) {
		t.Fatalf("claim: %d jobs, %v", len(claimed), err)
	}
	lock, run := map[string]sqlstore.Lock{}, map[string]sqlease.Run{}
	for _, c := range claimed {
		r, err := st.StartRun(ctx, nil, c.Lock, c.Name, c.NextRunAt, 1, c.Lock.Epoch)
		if err != nil {
			t.Fatalf("start run of %s: %v", c.Name, err)
		}
		lock[c.Name], run[c.Name] = c.Lock, r
	}

	// The locks lost meanwhile.
	for name, set := range map[string]string{
		"lost-both":  `locked_by = 'w2', lock_epoch = lock_epoch + 1`,
		"lost-epoch": `lock_epoch = lock_epoch + 1`,
	} {
		if _, err := db.ExecContext(ctx, `UPDATE `+prefix+`_jobs SET `+set+` WHERE id = ?`, lock[name].JobID); err != nil {
			t.Fatal(err)
		}
	}
	lostHolder := lock["lost-holder"]
	lostHolder.Holder = "w9"
	lock["lost-holder"] = lostHolder

	readJob := func(name string) jobRow {
		t.Helper()
		var j jobRow
		if err := db.QueryRowContext(ctx, `SELECT locked_by, `+fmtTime("locked_at")+`, `+fmtTime("next_run_at")+`,
	`+fmtTime("not_before")+`, `+fmtTime("last_run_at")+`, lock_epoch, lock_lease_epoch, attempt,
	`+fmtTime("last_modified_at")+` FROM `+prefix+`_jobs WHERE id = ?`, lock[name].JobID).Scan(&j.lockedBy, &j.lockedAt,
			&j.nextRunAt, &j.notBefore, &j.lastRunAt, &j.lockEpoch, &j.lockLeaseEpoch, &j.attempt, &j.lastModifiedAt); err != nil {
			t.Fatalf("job %s: %v", name, err)
		}
		return j
	}
	readRun := func(name string) runRow {
		t.Helper()
		var r runRow
		if err := db.QueryRowContext(ctx, `SELECT r.outcome, r.error, `+fmtTime("r.finished_at")+`, o.output, `+fmtTime("o.finished_at")+` FROM `+prefix+`_runs r
LEFT JOIN `+prefix+`_run_output o ON o.job_id = r.job_id AND o.scheduled_for = r.scheduled_for AND o.attempt = r.attempt
WHERE r.job_id = ? AND r.scheduled_for = ? AND r.attempt = ?`, lock[name].JobID, run[name].ScheduledFor, run[name].Attempt).Scan(
			&r.outcome, &r.errText, &r.finished, &r.output, &r.outputTime); err != nil {
			t.Fatalf("run of %s: %v", name, err)
		}
		return r
	}
	lost := []string{"lost-both", "lost-epoch", "lost-holder"}
	before := map[string]jobRow{}
	for _, name := range lost {
		before[name] = readJob(name)
	}

	// Times with nanoseconds: stored truncated to microseconds, as by row.
	next := now.Add(time.Hour + 123456789*time.Nanosecond)
	errText := "exit status 1: ошибка 😀\n\x00\x1b[0m \"quoted\""
	output := "line 1\nline 2 é😀\x00\x1b[0m"
	bigOutput := strings.Repeat("x\x01", 100_000) // escaped as JSON it is over maxJSONArg
	fin := map[string]sqlstore.Finish{
		"lost-both":   {Outcome: sqlease.OutcomeSucceeded, Next: next, Output: "lost"},
		"lost-epoch":  {Outcome: sqlease.OutcomeFailed, Error: "lost", Next: next},
		"lost-holder": {Outcome: sqlease.OutcomeSucceeded, Next: next, Output: "lost"},
		"oneoff":      {Outcome: sqlease.OutcomeSucceeded},
		"retry":       {Outcome: sqlease.OutcomeFailed, Error: "retry me", Next: run["retry"].ScheduledFor, Attempt: 1, Backoff: 90*time.Second + 500*time.Microsecond},
		"failed":      {Outcome: sqlease.OutcomeFailed, Error: errText, Next: next},
		"output":      {Outcome: sqlease.OutcomeSucceeded, Next: next, Output: output},
		"big-output":  {Outcome: sqlease.OutcomeSucceeded, Next: next, Output: bigOutput},
	}
	var reqs []sqlstore.FinishReq
	for i := len(names) - 1; i >= 0; i-- { // not in job id order
		n := names[i]
		reqs = append(reqs, sqlstore.FinishReq{Lock: lock[n], Run: run[n], Finish: fin[n]})
	}
	t0, err := st.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done, err := st.FinishRuns(ctx, nil, reqs)
	if err != nil {
		t.Fatalf("FinishRuns: %v", err)
	}
	t1, err := st.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		name := r.Run.Job
		if want := !strings.HasPrefix(name, "lost"); done[i] != want {
			t.Errorf("%s: done = %v, want %v", name, done[i], want)
		}
	}

	for _, name := range lost {
		if got := readJob(name); got != before[name] {
			t.Errorf("%s: job row changed under a lost lock:\n%+v\nwas\n%+v", name, got, before[name])
		}
		if got := readRun(name); got != (runRow{outcome: "running"}) {
			t.Errorf("%s: run changed under a lost lock: %+v", name, got)
		}
	}

	const layout = "2006-01-02 15:04:05.000000"
	ts := func(t time.Time) string { return t.UTC().Truncate(time.Microsecond).Format(layout) }
	parse := func(s string) time.Time {
		v, err := time.Parse(layout, s)
		if err != nil {
			t.Fatalf("time %q: %v", s, err)
		}
		return v
	}
	within := func(what, s string, lo, hi time.Time) {
		t.Helper()
		if v := parse(s); v.Before(lo.Truncate(time.Microsecond)) || v.After(hi) {
			t.Errorf("%s = %s, want within [%s, %s]", what, s, ts(lo), ts(hi))
		}
	}
	for _, name := range names[len(lost):] {
		f := fin[name]
		j := readJob(name)
		if j.lockedBy.Valid || j.lockedAt.Valid || j.lockLeaseEpoch != 0 || j.lockEpoch != lock[name].Epoch {
			t.Errorf("%s: not released: %+v", name, j)
		}
		if want := (sql.NullString{String: ts(f.Next), Valid: !f.Next.IsZero()}); j.nextRunAt.Valid != want.Valid || want.Valid && j.nextRunAt != want {
			t.Errorf("%s: next_run_at %v, want %v", name, j.nextRunAt, want)
		}
		if j.attempt != f.Attempt {
			t.Errorf("%s: attempt %d, want %d", name, j.attempt, f.Attempt)
		}
		if !j.lastRunAt.Valid || j.lastRunAt.String != j.lastModifiedAt {
			t.Errorf("%s: last_run_at %v, last_modified_at %s: want both the finish's now", name, j.lastRunAt, j.lastModifiedAt)
		} else {
			within(name+" last_run_at", j.lastRunAt.String, t0, t1)
		}
		switch {
		case f.Backoff == 0 && j.notBefore.Valid:
			t.Errorf("%s: not_before %s, want NULL", name, j.notBefore.String)
		case f.Backoff > 0 && !j.notBefore.Valid:
			t.Errorf("%s: not_before NULL, want now + %s", name, f.Backoff)
		case f.Backoff > 0:
			ms := time.Duration(f.Backoff.Milliseconds()) * time.Millisecond
			if got, want := parse(j.notBefore.String).Sub(parse(j.lastRunAt.String)), ms; got != want {
				t.Errorf("%s: not_before %s = last_run_at + %s, want + %s", name, j.notBefore.String, got, want)
			}
		}

		r := readRun(name)
		if r.outcome != string(f.Outcome) {
			t.Errorf("%s: run outcome %s, want %s", name, r.outcome, f.Outcome)
		}
		if want := (sql.NullString{String: sqlstore.CleanText(f.Error), Valid: f.Error != ""}); r.errText != want {
			t.Errorf("%s: run error %q, want %q", name, r.errText.String, want.String)
		}
		if !r.finished.Valid {
			t.Errorf("%s: run not finished", name)
		} else {
			within(name+" finished_at", r.finished.String, t0, t1)
		}
		if want := (sql.NullString{String: sqlstore.CleanOutput(f.Output), Valid: f.Output != ""}); r.output != want {
			t.Errorf("%s: output of %d bytes (kept %v), want %d bytes (kept %v)", name, len(r.output.String), r.output.Valid, len(want.String), want.Valid)
		}
		if r.output.Valid {
			within(name+" output's finished_at", r.outputTime.String, t0, t1)
		}
	}

	// A second finish of the same runs changes nothing: the jobs are
	// unlocked now.
	snapshot := func() string {
		var b strings.Builder
		for _, name := range names {
			fmt.Fprintf(&b, "%+v %+v\n", readJob(name), readRun(name))
		}
		return b.String()
	}
	was := snapshot()
	done, err = st.FinishRuns(ctx, nil, reqs)
	if err != nil {
		t.Fatalf("second FinishRuns: %v", err)
	}
	for i, d := range done {
		if d {
			t.Errorf("second finish of %s: done", reqs[i].Run.Job)
		}
	}
	if got := snapshot(); got != was {
		t.Errorf("a second finish changed rows:\n%s\nwas\n%s", got, was)
	}
}

// A group too large for one JSON argument is finished in several
// executions of each statement, every run as FinishRun would.
func TestBatchFinishLargeGroup(t *testing.T) {
	ctx := t.Context()
	st := newStore(t)
	now, err := st.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := range n {
		name := fmt.Sprintf("job-%02d", i)
		if _, _, err := st.InsertJob(ctx, sqlstore.StoredJob{Job: sqlease.Job{Name: name, MissedRuns: sqlease.RunOnce,
			Retry: sqlease.Retry{MaxAttempts: 1}, LockTimeout: time.Minute}, SpecHash: name}, now.Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	claimed, err := st.ClaimDue(ctx, "w1", n)
	if err != nil || len(claimed) != n {
		t.Fatalf("claim: %d jobs, %v", len(claimed), err)
	}
	// Control characters, escaped as six bytes each: 50 errors of 4 KiB and
	// outputs of 100 KiB make arguments of about 1.2 and 30 MiB.
	reqs := make([]sqlstore.FinishReq, n)
	for i, c := range claimed {
		r, err := st.StartRun(ctx, nil, c.Lock, c.Name, c.NextRunAt, 1, c.Lock.Epoch)
		if err != nil {
			t.Fatal(err)
		}
		reqs[i] = sqlstore.FinishReq{Lock: c.Lock, Run: r, Finish: sqlstore.Finish{Outcome: sqlease.OutcomeFailed,
			Error: fmt.Sprintf("%d:", i) + strings.Repeat("\x01", 5000), Output: fmt.Sprintf("%d:", i) + strings.Repeat("\x02", 100_000)}}
	}
	done, err := st.FinishRuns(ctx, nil, reqs)
	if err != nil {
		t.Fatalf("FinishRuns: %v", err)
	}
	for i, r := range reqs {
		if !done[i] {
			t.Errorf("%s: not done", r.Run.Job)
		}
		runs, err := st.Runs(ctx, r.Run.Job, 1)
		if err != nil || len(runs) != 1 {
			t.Fatalf("runs of %s: %d, %v", r.Run.Job, len(runs), err)
		}
		got := runs[0]
		if got.Outcome != sqlease.OutcomeFailed || got.Error != sqlstore.CleanText(r.Finish.Error) || got.Output != sqlstore.CleanOutput(r.Finish.Output) {
			t.Errorf("%s: outcome %s, error of %d bytes, output of %d bytes; want failed and what it was given", r.Run.Job, got.Outcome, len(got.Error), len(got.Output))
		}
	}
}
