package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// testClaimStartAhead: where the dialect has ClaimStartAhead, a claim-mode
// worker's claim takes, beside the jobs due now, those due within ahead of
// the database's now — not a paused one, one due later, or one waiting out
// a retry's backoff; the run of a one-off job claimed ahead records its
// occurrence as started_at, never the claim's earlier now; and the claim
// says when the next unpaused job falls due past its window, at its own
// now (a claim that claims nothing says nothing). Where it has none, the
// call is refused and claims nothing (the worker then claims only what is
// due, and asks NextDue).
func testClaimStartAhead(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	now := dbNow(t, s)
	ids := map[string]int64{}
	for _, j := range []struct {
		name   string
		at     time.Time
		paused bool
	}{
		{"backoff", now.Add(-2 * time.Minute), false},
		{"due", now.Add(-time.Minute), false},
		{"soon-paused", now.Add(1500 * time.Millisecond), true},
		{"soon", now.Add(2 * time.Second), false},
		{"later", now.Add(time.Hour), false},
	} {
		id, _, err := s.InsertJob(ctx, sqlstore.StoredJob{Job: sqlease.Job{Name: j.name, MissedRuns: sqlease.RunOnce, Paused: j.paused,
			Retry: sqlease.Retry{MaxAttempts: 3}, LockTimeout: time.Hour}, SpecHash: j.name}, j.at)
		if err != nil {
			t.Fatalf("insert job %s: %v", j.name, err)
		}
		ids[j.name] = id.ID
	}
	if !s.HasClaimStartAhead() {
		if c, _, err := s.ClaimAheadAndStart(ctx, "w", 0, 10, time.Millisecond); !errors.Is(err, sqlease.ErrInvalidConfig) || len(c) != 0 {
			t.Fatalf("ClaimAheadAndStart where the dialect has none = %d claimed, %v; want ErrInvalidConfig", len(c), err)
		}
		if j, err := s.Job(ctx, "due"); err != nil || j.LockedBy != "" {
			t.Fatalf("a refused claim ahead locked job due: %q, %v", j.LockedBy, err)
		}
		return
	}
	for _, bad := range []struct {
		limit int
		ahead time.Duration
		epoch int64
	}{{10, -time.Millisecond, 0}, {10, sqlstore.MaxClaimAhead + time.Millisecond, 0}, {0, time.Millisecond, 0}, {10, time.Millisecond, -1}} {
		if c, _, err := s.ClaimAheadAndStart(ctx, "w", bad.epoch, bad.limit, bad.ahead); !errors.Is(err, sqlease.ErrInvalidConfig) || len(c) != 0 {
			t.Fatalf("claim ahead by %s, limit %d, worker epoch %d = %d claimed, %v; want ErrInvalidConfig", bad.ahead, bad.limit, bad.epoch, len(c), err)
		}
	}
	if j, err := s.Job(ctx, "backoff"); err != nil || j.LockedBy != "" {
		t.Fatalf("a refused claim ahead locked job backoff: %q, %v", j.LockedBy, err)
	}
	// "backoff" (due first) fails an attempt and waits out its backoff:
	// not due before not_before, however long ago its next_run_at.
	claimed, _, err := s.ClaimAheadAndStart(ctx, "w", 0, 1, 0)
	if err != nil || len(claimed) != 1 || claimed[0].Name != "backoff" || claimed[0].Started == nil {
		t.Fatalf("claim of job backoff: %+v, %v", claimed, err)
	}
	b := claimed[0]
	if done, err := s.FinishRuns(ctx, nil, []sqlstore.FinishReq{{Lock: b.Lock, Run: *b.Started, Finish: sqlstore.Finish{
		Outcome: sqlease.OutcomeFailed, Error: "failed", Next: b.NextRunAt, Attempt: 1, Backoff: time.Hour}}}); err != nil || !done[0] {
		t.Fatalf("finish job backoff's run, failed, with a backoff: %v, %v", done, err)
	}

	// Without a window, only what is due now; the next due past it is
	// soon's (soon-paused, earlier, is paused).
	claimed, next, err := s.ClaimAheadAndStart(ctx, "w", 0, 10, 0)
	if err != nil || len(claimed) != 1 || claimed[0].Name != "due" {
		t.Fatalf("claim with no window = %+v, %v; want job due only", claimed, err)
	}
	due := claimed[0]
	if !next.Known || next.At.Sub(now.Add(2*time.Second)).Abs() > time.Millisecond || !next.Now.Equal(due.Now) {
		t.Fatalf("claim with no window says the next due %+v; want known, soon's %s, at the claim's now %s", next, now.Add(2*time.Second), due.Now)
	}
	if due.Started == nil || !due.Started.StartedAt.Equal(due.Now) {
		t.Fatalf("job due: run %+v; want started at the claim's now %s", due.Started, due.Now)
	}
	// A second ahead: soon (due in 2 s) needs 1 s of the database's clock
	// to pass. A claim that claims nothing says nothing of the next due.
	deadline := time.Now().Add(waitTimeout)
	var soon sqlstore.Claimed
	for {
		claimed, next, err = s.ClaimAheadAndStart(ctx, "w", 0, 10, sqlstore.MaxClaimAhead)
		if err != nil {
			t.Fatal(err)
		}
		if len(claimed) > 0 {
			if len(claimed) != 1 || claimed[0].Name != "soon" {
				t.Fatalf("claimed %+v; want soon alone (not soon-paused, later or backoff)", claimed)
			}
			soon = claimed[0]
			break
		}
		if next.Known {
			t.Fatalf("a claim of nothing says the next due: %+v", next)
		}
		if time.Now().After(deadline) {
			t.Fatal("job soon never claimed ahead")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !soon.NextRunAt.After(soon.Now) || soon.NextRunAt.Sub(soon.Now) > sqlstore.MaxClaimAhead {
		t.Fatalf("job soon claimed at %s for %s: want claimed ahead, by at most %s", soon.Now, soon.NextRunAt, sqlstore.MaxClaimAhead)
	}
	if soon.Started == nil || !soon.Started.StartedAt.Equal(soon.NextRunAt) || soon.Started.Epoch != soon.Lock.Epoch {
		t.Fatalf("job soon: run %+v; want started at its occurrence %s under its lock's epoch", soon.Started, soon.NextRunAt)
	}
	if !next.Known || next.At.Sub(now.Add(time.Hour)).Abs() > time.Millisecond {
		t.Fatalf("claim of soon says the next due %+v; want later's, %s", next, now.Add(time.Hour))
	}
	// What the ledger records (and the API shows).
	for _, c := range []sqlstore.Claimed{due, soon} {
		runs, err := s.Runs(ctx, c.Name, 10)
		if err != nil || len(runs) != 1 {
			t.Fatalf("runs of %s: %d, %v", c.Name, len(runs), err)
		}
		want := later(c.Now, c.NextRunAt)
		if d := runs[0].StartedAt.Sub(want); d < -time.Millisecond || d > time.Millisecond || runs[0].StartedAt.Before(c.NextRunAt) {
			t.Fatalf("run of %s: started_at %s, scheduled for %s, claimed at %s; want %s", c.Name, runs[0].StartedAt, c.NextRunAt, c.Now, want)
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
