package storetest

import (
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// testNextDue: where the dialect has NextDue, it is the time until the
// earliest occurrence still to come, in database time; none while every
// job is due already, paused or has no occurrence. A claim-mode worker
// sleeps until then (a hint only: the claim decides).
func testNextDue(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	if s.Dialect().Jobs.NextDue == "" {
		t.Skip("the dialect has no NextDue: claim-mode workers poll")
	}
	if _, ok, err := s.NextDue(ctx); err != nil || ok {
		t.Fatalf("NextDue without jobs = %t, %v; want none", ok, err)
	}
	now := dbNow(t, s)
	for _, j := range []struct {
		name   string
		at     time.Time
		paused bool
	}{
		{"due-already", now.Add(-time.Minute), false},
		{"paused-sooner", now.Add(time.Minute), true},
		{"next", now.Add(time.Hour), false},
		{"later", now.Add(2 * time.Hour), false},
	} {
		if _, _, err := s.InsertJob(ctx, sqlstore.StoredJob{Job: sqlease.Job{Name: j.name, MissedRuns: sqlease.RunOnce, Paused: j.paused,
			Retry: sqlease.Retry{MaxAttempts: 3}, LockTimeout: time.Hour}, SpecHash: j.name}, j.at); err != nil {
			t.Fatalf("insert job %s: %v", j.name, err)
		}
	}
	d, ok, err := s.NextDue(ctx)
	if err != nil || !ok || d > time.Hour || d < time.Hour-time.Minute {
		t.Fatalf("NextDue = %s, %t, %v; want just under 1h (the paused and the past job do not count)", d, ok, err)
	}
	// Sub-second precision: a job due in 1.5 s reads as 1.5 s, not 1 or 2
	// (SQLite keeps milliseconds, and julianday's arithmetic is a few
	// microseconds off).
	if _, _, err := s.InsertJob(ctx, sqlstore.StoredJob{Job: sqlease.Job{Name: "soon", MissedRuns: sqlease.RunOnce,
		Retry: sqlease.Retry{MaxAttempts: 3}, LockTimeout: time.Hour}, SpecHash: "soon"}, dbNow(t, s).Add(1500*time.Millisecond)); err != nil {
		t.Fatalf("insert job soon: %v", err)
	}
	if d, ok, err = s.NextDue(ctx); err != nil || !ok || d > 1505*time.Millisecond || d < 1200*time.Millisecond {
		t.Fatalf("NextDue = %s, %t, %v; want about 1.5s", d, ok, err)
	}
}
