package scheduler

import (
	"testing"
	"time"
)

// The latest claim's group outlives its runs until its timer fires: a run
// of the claim that starts after the others ended joins it (no timer of
// its own), a run of another claim does not; an emptied group that is not
// the latest goes at once, and the latest once its timer fired.
func TestBeatGroupOutlivesItsRunsUntilItFires(t *testing.T) {
	var b beatGroups
	s := &Scheduler{}
	claim := time.Now()
	run := func(sent time.Time) *runBeat {
		return &runBeat{trust: newLockTrust(sent, time.Minute, func() {})}
	}
	r1 := run(claim)
	b.join(s, r1, 50*time.Millisecond)
	b.leave(r1)
	r2 := run(claim)
	b.join(s, r2, 50*time.Millisecond)
	if r2.group != r1.group {
		t.Error("a run of the same claim, started after the other ended, got a group (and a timer) of its own")
	}
	r3 := run(claim.Add(time.Millisecond)) // another claim
	b.join(s, r3, 50*time.Millisecond)
	if r3.group == r1.group {
		t.Error("a run of another claim joined the first claim's group")
	}
	b.leave(r2)
	b.mu.Lock()
	n := len(b.m)
	b.mu.Unlock()
	if n != 1 {
		t.Errorf("%d groups pending, want 1: the first claim's, emptied and not the last made, goes at once", n)
	}
	b.leave(r3)
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		n := len(b.m)
		b.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d groups still pending 5 s after their timers (50 ms) were due", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
