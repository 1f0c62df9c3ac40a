package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// testClaimAhead: where the dialect has ClaimStartJobsAheadFenced, a leader's
// claim takes, beside the jobs due now, those of the named jobs due within
// ahead of the database's now — not a paused one, one due later, or one
// waiting out a retry's backoff — fenced as ClaimStartJobsFenced is; the run
// of a one-off job claimed ahead records its occurrence as started_at, never
// the claim's earlier now, and the claim says its now so that the leader
// can start it on time. Where it has none, the call is refused and claims
// nothing (the leader then claims only what is due).
func testClaimAhead(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	lease, err := s.Acquire(ctx, "lead", "w", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tok := lease.Token()
	now := dbNow(t, s)
	ids := map[string]int64{}
	for _, j := range []struct {
		name   string
		at     time.Time
		paused bool
	}{
		{"due", now.Add(-time.Minute), false},
		{"soon", now.Add(2 * time.Second), false},
		{"soon-paused", now.Add(2 * time.Second), true},
		{"later", now.Add(time.Hour), false},
		{"backoff", now.Add(-time.Minute), false},
	} {
		id, _, err := s.InsertJob(ctx, sqlstore.StoredJob{Job: sqlease.Job{Name: j.name, MissedRuns: sqlease.RunOnce, Paused: j.paused,
			Retry: sqlease.Retry{MaxAttempts: 3}, LockTimeout: time.Hour}, SpecHash: j.name}, j.at)
		if err != nil {
			t.Fatalf("insert job %s: %v", j.name, err)
		}
		ids[j.name] = id.ID
	}
	all := []int64{ids["due"], ids["soon"], ids["soon-paused"], ids["later"], ids["backoff"]}
	if !s.HasClaimAhead() {
		if c, err := s.ClaimStartJobsAheadFenced(ctx, tok, all, time.Minute); !errors.Is(err, sqlease.ErrInvalidConfig) || len(c) != 0 {
			t.Fatalf("ClaimStartJobsAheadFenced where the dialect has none = %d claimed, %v; want ErrInvalidConfig", len(c), err)
		}
		if j, err := s.Job(ctx, "due"); err != nil || j.LockedBy != "" {
			t.Fatalf("a refused claim ahead locked job due: %q, %v", j.LockedBy, err)
		}
		return
	}
	// "backoff" failed an attempt and waits out its backoff: not due before
	// not_before, however long ago its next_run_at.
	claimed, err := s.ClaimStartJobsAheadFenced(ctx, tok, []int64{ids["backoff"]}, 0)
	if err != nil || len(claimed) != 1 || claimed[0].Started == nil {
		t.Fatalf("claim of job backoff: %d claimed, %v", len(claimed), err)
	}
	b := claimed[0]
	if done, err := s.FinishRunsFenced(ctx, tok, []sqlstore.FinishReq{{Lock: b.Lock, Run: *b.Started, Finish: sqlstore.Finish{
		Outcome: sqlease.OutcomeFailed, Error: "failed", Next: b.NextRunAt, Attempt: 1, Backoff: time.Hour}}}); err != nil || !done[0] {
		t.Fatalf("finish job backoff's run, failed, with a backoff: %v, %v", done, err)
	}

	for _, bad := range []time.Duration{-time.Millisecond, sqlstore.MaxClaimAhead + time.Millisecond} {
		if c, err := s.ClaimStartJobsAheadFenced(ctx, tok, all, bad); !errors.Is(err, sqlease.ErrInvalidConfig) || len(c) != 0 {
			t.Fatalf("claim ahead by %s = %d claimed, %v; want ErrInvalidConfig", bad, len(c), err)
		}
	}
	// Fenced: another holder, or an earlier epoch, claims nothing.
	for _, other := range []sqlease.Token{{Name: "lead", Holder: "x", Epoch: tok.Epoch}, {Name: "lead", Holder: "w", Epoch: tok.Epoch + 1}} {
		if c, err := s.ClaimStartJobsAheadFenced(ctx, other, all, sqlstore.MaxClaimAhead); err != nil || len(c) != 0 {
			t.Fatalf("claim ahead under %+v (not held) = %d claimed, %v; want none", other, len(c), err)
		}
	}
	// Without a window, only what is due now.
	if c, err := s.ClaimStartJobsAheadFenced(ctx, tok, []int64{ids["soon"]}, 0); err != nil || len(c) != 0 {
		t.Fatalf("claim of job soon (due in 2s) with no window = %d claimed, %v; want none", len(c), err)
	}
	if c, err := s.ClaimStartJobsAheadFenced(ctx, tok, []int64{ids["soon"]}, time.Second); err != nil || len(c) != 0 {
		t.Fatalf("claim of job soon (due in 2s) 1s ahead = %d claimed, %v; want none", len(c), err)
	}

	claimed, err = s.ClaimStartJobsAheadFenced(ctx, tok, all, sqlstore.MaxClaimAhead)
	if err != nil {
		t.Fatal(err)
	}
	// Up to a second ahead, job soon (due in 2 s) needs 1 s of the
	// database's clock to pass: claim again until it is within reach.
	deadline := time.Now().Add(waitTimeout)
	got := map[string]sqlstore.Claimed{}
	for {
		for _, c := range claimed {
			got[c.Name] = c
		}
		if _, ok := got["soon"]; ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
		if claimed, err = s.ClaimStartJobsAheadFenced(ctx, tok, []int64{ids["soon"], ids["soon-paused"], ids["later"], ids["backoff"]}, sqlstore.MaxClaimAhead); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 2 {
		names := make([]string, 0, len(got))
		for n := range got {
			names = append(names, n)
		}
		t.Fatalf("claimed %v; want due and soon (not soon-paused, later or backoff)", names)
	}
	due, soon := got["due"], got["soon"]
	if due.Started == nil || soon.Started == nil || due.Started.Epoch != tok.Epoch || soon.Started.Epoch != tok.Epoch {
		t.Fatalf("runs not started under the lease's epoch %d: due %+v, soon %+v", tok.Epoch, due.Started, soon.Started)
	}
	if !soon.NextRunAt.After(soon.Now) || soon.NextRunAt.Sub(soon.Now) > sqlstore.MaxClaimAhead {
		t.Fatalf("job soon claimed at %s for %s: want claimed ahead, by at most %s", soon.Now, soon.NextRunAt, sqlstore.MaxClaimAhead)
	}
	if !soon.Started.StartedAt.Equal(soon.NextRunAt) || !due.Started.StartedAt.Equal(due.Now) {
		t.Fatalf("started_at: soon %s (due %s), due %s (claimed at %s); want each the later of the two", soon.Started.StartedAt, soon.NextRunAt,
			due.Started.StartedAt, due.Now)
	}
	// What the ledger records (and the API shows).
	for _, c := range []sqlstore.Claimed{due, soon} {
		runs, err := s.Runs(ctx, c.Name, 10)
		if err != nil || len(runs) != 1 {
			t.Fatalf("runs of %s: %d, %v", c.Name, len(runs), err)
		}
		want := c.Now
		if c.NextRunAt.After(want) {
			want = c.NextRunAt
		}
		if d := runs[0].StartedAt.Sub(want); d < -time.Millisecond || d > time.Millisecond || runs[0].StartedAt.Before(c.NextRunAt) {
			t.Fatalf("run of %s: started_at %s, scheduled for %s, claimed at %s; want %s", c.Name, runs[0].StartedAt, c.NextRunAt, c.Now, want)
		}
	}
}
