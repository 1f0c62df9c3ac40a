package storetest

import (
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// testRunOutput: a run's output (sqlstore.Finish.Output) is written in the
// transaction of its finish and only there: a finish refused by the lease
// fence (a deposed leader), by the job lock (a reclaimed job) or rolled back
// by its fenced function keeps none, in the one-run and the batch forms. It
// is read back with its run (stored as CleanOutput makes it: no NUL, valid
// UTF-8), none for a run without, and goes with the job when the job is
// deleted and with the run when retention prunes it.
func testRunOutput(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	if s.Dialect().Jobs.Output.Insert == "" {
		t.Fatalf("dialect %s keeps no run output (JobQueries.Output.Insert is empty)", s.Dialect().Name)
	}
	runOf := func(job string) sqlease.Run {
		t.Helper()
		runs := jobRuns(t, s, job)
		if len(runs) != 1 {
			t.Fatalf("Runs(%s) = %d runs; want 1", job, len(runs))
		}
		return runs[0]
	}
	ok := sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}
	withOutput := func(out string) sqlstore.Finish { f := ok; f.Output = out; return f }

	// Kept and read back, cleaned; a run without output has none.
	l, r := startedRun(t, s, "kept", "w")
	raw := "line 1\nbad \xff byte, NUL \x00 here\n" + strings.Repeat("é", 3000) + "\nend\n"
	if err := s.FinishRun(ctx, nil, l, r, withOutput(raw)); err != nil {
		t.Fatalf("FinishRun with output: %v", err)
	}
	if got, want := runOf("kept").Output, sqlstore.CleanOutput(raw); got != want {
		t.Errorf("output read back: %q…, want %q…", trim(got), trim(want))
	}
	if got := runOf("kept").Output; strings.ContainsRune(got, 0) || !strings.HasSuffix(got, "é\nend\n") {
		t.Errorf("output read back: %q, want it cleaned and whole", trim(got))
	}
	l, r = startedRun(t, s, "silent", "w")
	if err := s.FinishRun(ctx, nil, l, r, ok); err != nil {
		t.Fatal(err)
	}
	if got := runOf("silent").Output; got != "" {
		t.Errorf("a run finished without output reads %q", got)
	}

	// A lost job lock (a reclaim bumps its epoch): nothing written.
	l, r = startedRun(t, s, "reclaimed", "w")
	stale := l
	stale.Epoch++
	if err := s.FinishRun(ctx, nil, stale, r, withOutput("from the stale lock")); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Errorf("FinishRun under a lost lock = %v, want ErrLeaseLost", err)
	}
	if got := runOf("reclaimed"); got.Output != "" || got.Outcome != sqlease.OutcomeRunning {
		t.Errorf("a finish under a lost lock left outcome %s, output %q", got.Outcome, got.Output)
	}
	if err := s.FinishRun(ctx, nil, l, r, withOutput("from the holder")); err != nil {
		t.Fatal(err)
	}
	if got := runOf("reclaimed").Output; got != "from the holder" {
		t.Errorf("output %q, want the holder's", got)
	}

	// A deposed leader: its fenced finish is refused and keeps nothing;
	// the new leader's finish of the same run keeps its own.
	a := mustAcquire(t, s, leaseName, "holder-a", shortTTL)
	l, r = startedRun(t, s, "deposed", "w")
	waitExpired(t, s, leaseName)
	b := mustAcquire(t, s, leaseName, "holder-b", longTTL)
	err := s.Fenced(ctx, a.Token(), func(tx *sql.Tx) error { return s.FinishRun(ctx, tx, l, r, withOutput("from the deposed leader")) })
	if !errors.Is(err, sqlease.ErrFenceFailed) {
		t.Errorf("the deposed leader's fenced finish = %v, want ErrFenceFailed", err)
	}
	if got := runOf("deposed"); got.Output != "" || got.Outcome != sqlease.OutcomeRunning {
		t.Errorf("the deposed leader's finish left outcome %s, output %q", got.Outcome, got.Output)
	}
	// Rolled back by its own fenced function: the output goes with it.
	errLater := errors.New("storetest: a later write of the transaction failed")
	err = s.Fenced(ctx, b.Token(), func(tx *sql.Tx) error {
		if err := s.FinishRun(ctx, tx, l, r, withOutput("rolled back")); err != nil {
			return err
		}
		return errLater
	})
	if !errors.Is(err, errLater) {
		t.Fatalf("fenced finish then failure = %v", err)
	}
	if got := runOf("deposed").Output; got != "" {
		t.Errorf("a rolled back finish kept output %q", got)
	}
	if err := s.Fenced(ctx, b.Token(), func(tx *sql.Tx) error { return s.FinishRun(ctx, tx, l, r, withOutput("from the leader")) }); err != nil {
		t.Fatalf("the leader's fenced finish: %v", err)
	}
	if got := runOf("deposed").Output; got != "from the leader" {
		t.Errorf("output %q, want the leader's", got)
	}

	// The batch finish, on the pool and fenced: outputs of the runs done,
	// none of the one whose lock is lost.
	if s.Batched() {
		for i, fenced := range []bool{false, true} {
			names := []string{"batch-a", "batch-b", "batch-lost"}
			var reqs []sqlstore.FinishReq
			for _, n := range names {
				n += "-" + string(rune('0'+i))
				l, r := startedRun(t, s, n, "w")
				reqs = append(reqs, sqlstore.FinishReq{Lock: l, Run: r, Finish: withOutput("out of " + n)})
			}
			reqs[1].Finish.Output = ""
			reqs[2].Lock.Epoch++
			var done []bool
			var err error
			if fenced {
				err = s.Fenced(ctx, b.Token(), func(tx *sql.Tx) (err error) { done, err = s.FinishRuns(ctx, tx, reqs); return err })
			} else {
				done, err = s.FinishRuns(ctx, nil, reqs)
			}
			if err != nil || !done[0] || !done[1] || done[2] {
				t.Fatalf("FinishRuns (fenced %t) = %v, %v; want the first two done", fenced, done, err)
			}
			for k, want := range []string{"out of " + reqs[0].Run.Job, "", ""} {
				if got := runOf(reqs[k].Run.Job).Output; got != want {
					t.Errorf("batch finish (fenced %t): %s has output %q, want %q", fenced, reqs[k].Run.Job, got, want)
				}
			}
		}
	}

	// Deleting the job deletes its output; retention prunes the outputs
	// with their runs.
	goneWithJobAndRuns(t, s, "output", "deposed", l.JobID, outputRows)
}

// outputRows counts the output rows of a job (all jobs: -1), read from the
// table Output.Insert writes.
func outputRows(t *testing.T, s *sqlstore.Store, jobID int64) int {
	t.Helper()
	return jobRows(t, s, insertInto, "Output.Insert", s.Dialect().Jobs.Output.Insert, jobID)
}
