package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// testFinishRunSkipping: a skip job's finish records the occurrences its
// run overlapped as skipped and finishes the run in one write under the
// lock: under a lost lock nothing is written and the job stays as it was;
// under the lock every occurrence reads back once, the last one's error
// counting those not recorded one by one, and the job moves to the next.
// With a breaker update it is written too.
func testFinishRunSkipping(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	due := dbNow(t, s).Add(-time.Second).Truncate(time.Millisecond)
	insertJob(t, s, "poller", time.Second, due, sqlease.Breaker{Failures: 3, CoolDown: time.Minute})
	claimed, err := s.ClaimDue(ctx, "w", 10)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	c := claimed[0]
	r, err := s.StartRun(ctx, nil, c.Lock, c.Name, c.NextRunAt, 1, c.Lock.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	skip := sqlstore.Skipped{At: []time.Time{due.Add(time.Second), due.Add(2 * time.Second), due.Add(3 * time.Second)},
		More: 5, Last: due.Add(8 * time.Second), Reason: sqlease.OverlapSkippedError}
	next := due.Add(9 * time.Second)
	f := sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded, Next: next}
	b := &sqlstore.BreakerUpdate{Failures: 0}

	stale := c.Lock
	stale.Epoch++
	if err := s.FinishRunSkipping(ctx, nil, stale, r, f, skip, b); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("FinishRunSkipping under a lost lock: %v, want ErrLeaseLost", err)
	}
	if runs, err := s.Runs(ctx, "poller", 20); err != nil || len(runs) != 1 || runs[0].Outcome != sqlease.OutcomeRunning {
		t.Fatalf("a refused FinishRunSkipping wrote: %+v, %v", runs, err)
	}
	if j := mustJob(t, s, "poller"); j.LockedBy != "w" {
		t.Fatalf("a refused FinishRunSkipping released the job: locked by %q", j.LockedBy)
	}

	if err := s.FinishRunSkipping(ctx, nil, c.Lock, r, f, skip, b); err != nil {
		t.Fatalf("FinishRunSkipping: %v", err)
	}
	runs, err := s.Runs(ctx, "poller", 20)
	if err != nil || len(runs) != 4 {
		t.Fatalf("runs = %+v, %v", runs, err)
	}
	// Newest first: the three skipped, then the run.
	for i, at := range []time.Time{skip.At[2], skip.At[1], skip.At[0]} {
		got := runs[i]
		if !got.ScheduledFor.Equal(at) || got.Outcome != sqlease.OutcomeSkipped || got.Attempt != 1 || got.FinishedAt.IsZero() ||
			got.Holder != "w" || got.Epoch != c.Lock.Epoch {
			t.Fatalf("runs[%d] = %+v, want a skipped run of %v", i, got, at)
		}
		if i == 0 {
			if !strings.HasPrefix(got.Error, sqlease.OverlapSkippedError) || !strings.Contains(got.Error, "and 5 later occurrences until") {
				t.Fatalf("the last skipped row's error %q does not count the rest", got.Error)
			}
		} else if got.Error != sqlease.OverlapSkippedError {
			t.Fatalf("runs[%d].Error = %q", i, got.Error)
		}
	}
	if got := runs[3]; !got.ScheduledFor.Equal(due) || got.Outcome != sqlease.OutcomeSucceeded {
		t.Fatalf("the run = %+v", got)
	}
	j := mustJob(t, s, "poller")
	if j.LockedBy != "" || !j.NextRunAt.Equal(next) || j.Attempt != 0 {
		t.Fatalf("after the finish: locked by %q next %v (want %v) attempt %d", j.LockedBy, j.NextRunAt, next, j.Attempt)
	}

	// An occurrence in the ledger already refuses the whole write.
	claimed, err = s.ClaimDue(ctx, "w", 10)
	if err == nil && len(claimed) == 0 {
		if _, err := s.Trigger(ctx, "poller"); err != nil {
			t.Fatal(err)
		}
		claimed, err = s.ClaimDue(ctx, "w", 10)
	}
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim again: %d, %v", len(claimed), err)
	}
	c = claimed[0]
	r, err = s.StartRun(ctx, nil, c.Lock, c.Name, c.NextRunAt, 1, c.Lock.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	dup := sqlstore.Skipped{At: []time.Time{skip.At[0]}, Reason: sqlease.OverlapSkippedError}
	if err := s.FinishRunSkipping(ctx, nil, c.Lock, r, sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded, Next: next.Add(time.Hour)}, dup, nil); !errors.Is(err, sqlease.ErrConflict) {
		t.Fatalf("skipping an occurrence in the ledger: %v, want ErrConflict", err)
	}
	if j := mustJob(t, s, "poller"); j.LockedBy != "w" {
		t.Fatalf("a refused finish released the job: locked by %q", j.LockedBy)
	}
}
