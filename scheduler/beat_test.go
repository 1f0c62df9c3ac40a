package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/scheduler"
)

// The runs one claim started share one timer for their first heartbeat
// (exec.go, beatGroups). Every run still running when it fires must get
// its own heartbeat loop: runs that outlive their lock's trust keep it
// (Ensure passes at their end, their context is not cancelled), whichever
// of the claim's runs joined the group first.
func TestClaimRunsOutlivingTheirLockAllHeartbeat(t *testing.T) {
	st := dbtest.SQLite(t)
	const n = 4
	// Trusted 1.5 s from the claim without a beat; beats every 500 ms,
	// each with up to 1 s to succeed (a loaded machine's SQLite).
	const lockTimeout = 2 * time.Second
	past := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	for i := range n {
		created(t, st, sqlease.Job{Name: fmt.Sprintf("long-%d", i), Schedule: sqlease.Schedule{At: past}, LockTimeout: lockTimeout})
	}
	var mu sync.Mutex
	ends := map[string]error{}
	done := make(chan struct{}, n)
	s := newSched(t, scheduler.Config{Store: st, Holder: "w1", Handler: func(ctx context.Context, r sqlease.Run) error {
		select {
		case <-time.After(2 * lockTimeout):
		case <-ctx.Done():
		}
		err := scheduler.Ensure(ctx)
		mu.Lock()
		first := r.Attempt == 1
		if first {
			ends[r.Job] = err
		}
		mu.Unlock()
		if first {
			done <- struct{}{}
		}
		return err
	}})
	runClaim(t, s)
	for range n {
		recv(t, done, 20*time.Second, "end of a run")
	}
	mu.Lock()
	defer mu.Unlock()
	for job, err := range ends {
		if err != nil {
			t.Errorf("%s: Ensure at the end of a run of 2 lock timeouts = %v, want nil (heartbeats kept its lock)", job, err)
		}
	}
	if len(ends) != n {
		t.Errorf("%d runs ended, want %d", len(ends), n)
	}
	dbtest.WaitFor(t, 5*time.Second, "no first-beat group pending after every run ended", func() bool { return scheduler.BeatGroups(s) == 0 })
}

// Runs that end before their first beat leave their claim's group, and the
// group goes when its timer fires: nothing stays behind.
func TestShortClaimRunsLeaveNoBeatPending(t *testing.T) {
	st := dbtest.SQLite(t)
	const n = 40
	past := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	for i := range n {
		created(t, st, sqlease.Job{Name: fmt.Sprintf("short-%02d", i), Schedule: sqlease.Schedule{At: past}, LockTimeout: time.Second})
	}
	done := make(chan struct{}, n)
	s := newSched(t, scheduler.Config{Store: st, Holder: "w1", Handler: func(ctx context.Context, r sqlease.Run) error {
		done <- struct{}{}
		return nil
	}})
	runClaim(t, s)
	for range n {
		recv(t, done, 20*time.Second, "a run")
	}
	// The runs' handlers returned; their finishes (and their leaving) follow.
	dbtest.WaitFor(t, 5*time.Second, "no first-beat group pending (lock_timeout 1 s: due 250 ms after the claim) after every run ended", func() bool { return scheduler.BeatGroups(s) == 0 })
}
