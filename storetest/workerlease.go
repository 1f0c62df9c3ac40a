package storetest

import (
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// testWorkerLeaseClaims: a claim made under a worker lease
// (ClaimDueUnder) is the worker's while that lease lives, and reclaimable
// at once — long before the job's lock_timeout — when the lease has
// expired or was taken again under a higher epoch (the worker restarted
// with the same holder id); a claim made without a worker lease keeps the
// lock_timeout rule; a leader's claim (positive lease epoch) is never
// taken for a worker's.
func testWorkerLeaseClaims(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	due := func(name string) {
		t.Helper()
		if _, _, err := s.InsertJob(ctx, sqlstore.StoredJob{Job: sqlease.Job{Name: name, MissedRuns: sqlease.RunOnce,
			Retry: sqlease.Retry{MaxAttempts: 3}, LockTimeout: time.Hour}, SpecHash: name}, dbNow(t, s).Add(-time.Second)); err != nil {
			t.Fatalf("insert job %s: %v", name, err)
		}
	}
	claim := func(holder string, tok *sqlease.Token) []string {
		t.Helper()
		var c []sqlstore.Claimed
		var err error
		if tok != nil {
			c, err = s.ClaimDueUnder(ctx, *tok, 10)
		} else {
			c, err = s.ClaimDue(ctx, holder, 10)
		}
		if err != nil {
			t.Fatalf("claim as %s: %v", holder, err)
		}
		var names []string
		for _, x := range c {
			names = append(names, x.Name)
		}
		return names
	}
	worker := func(holder string, ttl time.Duration) sqlease.Token {
		t.Helper()
		l, err := s.Acquire(ctx, sqlstore.WorkerLeasePrefix+holder, holder, ttl)
		if err != nil {
			t.Fatalf("worker lease of %s: %v", holder, err)
		}
		return l.Token()
	}

	// Not a worker lease: refused, nothing claimed.
	if _, err := s.ClaimDueUnder(ctx, sqlease.Token{Name: "sqlease-leader", Holder: "a", Epoch: 1}, 10); err == nil {
		t.Fatal("ClaimDueUnder with a token that is not a worker lease: want an error")
	}

	due("w1")
	a := worker("a", 600*time.Millisecond)
	if got := claim("a", &a); len(got) != 1 || got[0] != "w1" {
		t.Fatalf("a's claim under its worker lease: %v", got)
	}
	b := worker("b", time.Minute)
	if got := claim("b", &b); len(got) != 0 {
		t.Fatalf("b claimed %v while a's worker lease lives", got)
	}
	if got := claim("c", nil); len(got) != 0 {
		t.Fatalf("a claim without a worker lease took %v while a's worker lease lives", got)
	}
	waitDBTime(t, s, 700*time.Millisecond)
	c, err := s.ClaimDueUnder(ctx, b, 10)
	if err != nil || len(c) != 1 || c[0].Name != "w1" || !c[0].Reclaimed && s.Dialect().Jobs.ClaimDueReclaimed {
		t.Fatalf("b's claim after a's worker lease expired (lock_timeout 1h): %+v, %v", c, err)
	}
	if c[0].LockedBy != "b" {
		t.Fatalf("reclaimed job locked by %q, want b", c[0].LockedBy)
	}

	// The same holder id under a new epoch (a restarted worker) does not
	// keep its old claims alive.
	due("w2")
	old := worker("r", 500*time.Millisecond)
	if got := claim("r", &old); len(got) != 1 || got[0] != "w2" {
		t.Fatalf("r's claim: %v", got)
	}
	waitDBTime(t, s, 600*time.Millisecond)
	restarted := worker("r", time.Minute)
	if restarted.Epoch <= old.Epoch {
		t.Fatalf("re-acquired worker lease epoch %d, want > %d", restarted.Epoch, old.Epoch)
	}
	if got := claim("r", &restarted); len(got) != 1 || got[0] != "w2" {
		t.Fatalf("the restarted worker's claim of its predecessor's job: %v", got)
	}

	// A claim without a worker lease keeps lock_timeout: nobody takes it.
	due("w3")
	if got := claim("legacy", nil); len(got) != 1 || got[0] != "w3" {
		t.Fatalf("claim without a worker lease: %v", got)
	}
	if got := claim("b", &b); len(got) != 0 {
		t.Fatalf("b took %v, claimed without a worker lease an hour before its lock_timeout", got)
	}
}

// waitDBTime waits until d has passed in database time.
func waitDBTime(t *testing.T, s *sqlstore.Store, d time.Duration) {
	t.Helper()
	until := dbNow(t, s).Add(d)
	for dbNow(t, s).Before(until) {
		time.Sleep(20 * time.Millisecond)
	}
}
