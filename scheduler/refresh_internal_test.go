package scheduler

import (
	"testing"
	"time"

	"github.com/sqlease/sqlease/sqlstore"
)

// TestRefreshFrom: a refresh re-reads only what a transaction in flight at
// the previous refresh could still have committed — the overlap before that
// refresh — and, once the newest stamp is older than that, reads past its
// cursor alone: a burst of writes is re-read while within one overlap of a
// refresh, not forever nor for twice as long.
func TestRefreshFrom(t *testing.T) {
	base := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	const overlap = 5 * time.Second
	for _, c := range []struct {
		name        string
		hw          time.Time
		hwID        int64
		lastRefresh time.Time
		wantT       time.Time
		wantID      int64
	}{
		{"first refresh of a term: the overlap before the newest stamp", at(10), 7, time.Time{}, at(5), 0},
		{"a burst stamped within the overlap of the last refresh: re-read", at(10), 7, at(12), at(7), 0},
		{"a burst exactly one overlap before the last refresh: still re-read", at(10), 7, at(15), at(10), 0},
		{"a burst older than one overlap: only past the cursor", at(10), 7, at(15.5), at(10), 7},
		{"after a reload (no cursor id): rows at the newest stamp again", at(10), 0, at(20), at(10), 0},
		{"a stamp ahead of the estimated clock: from the last refresh's edge", at(30), 7, at(20), at(15), 0},
	} {
		gotT, gotID := refreshFrom(c.hw, c.hwID, c.lastRefresh, overlap)
		if !gotT.Equal(c.wantT) || gotID != c.wantID {
			t.Errorf("%s: refreshFrom(hw %s/%d, last refresh %s) = %s/%d, want %s/%d", c.name,
				c.hw.Format("15:04:05.0"), c.hwID, c.lastRefresh.Format("15:04:05.0"), gotT.Format("15:04:05.0"), gotID,
				c.wantT.Format("15:04:05.0"), c.wantID)
		}
	}
}

// TestWindowUsedUp: a window cut short by MaxScheduled is used up once
// nothing of it is left to dispatch but failed claims waiting for their
// retry; the jobs past it are not held back by those retries.
func TestWindowUsedUp(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	newLeader := func() *leader {
		l := &leader{sched: newSchedule(), failed: map[int64]int{}, running: map[int64]bool{}}
		l.dbNow, l.localAt = now, time.Now()
		l.truncated, l.loadedUntil = true, now.Add(-time.Second)
		return l
	}
	l := newLeader()
	if !l.windowUsedUp() {
		t.Error("an empty truncated window is not used up")
	}
	l.sched.set(1, now)
	if l.windowUsedUp() {
		t.Error("a window with an entry to dispatch is used up")
	}
	l.failed[1] = 2 // entry 1 is a retry of a claim that failed
	if !l.windowUsedUp() {
		t.Error("a window left with only a failed claim's retry is not used up")
	}
	l.failed[7] = 6 // given up: no longer scheduled
	l.sched.set(2, now)
	if l.windowUsedUp() {
		t.Error("a window with a retry and an entry to dispatch is used up")
	}
	l = newLeader()
	l.truncated = false
	if l.windowUsedUp() {
		t.Error("a window that was not cut short is used up")
	}
	l = newLeader()
	l.loadedUntil = now.Add(time.Hour)
	if l.windowUsedUp() {
		t.Error("a window whose end is still ahead is used up")
	}
}

// TestReloadKeepsWhatEndedWhileItRead: a reload read beside dispatch
// replaces the schedule, but the jobs that stopped running while it read
// keep what the loop gave them meanwhile — a claim's retry, and a run's
// next occurrence, even one past the window the reload replaces — and
// their rows as read (from before) are left out.
func TestReloadKeepsWhatEndedWhileItRead(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	l := &leader{s: &Scheduler{cfg: Config{ScheduleHorizon: time.Second, MaxScheduled: 100}}, sched: newSchedule(),
		failed: map[int64]int{}, running: map[int64]bool{1: true, 2: true}, ended: map[int64]bool{},
		endedNext: map[int64]sqlstore.ScheduleEntry{}}
	l.dbNow, l.localAt, l.loadedUntil = now, time.Now(), now.Add(time.Second)
	l.setReading(true) // the reload's read is in flight
	// Job 1's run ends, its next occurrence past the current window (so
	// not scheduled yet); job 2's claim found nothing and is retried soon
	// (bookClaim).
	l.runEnded(sqlstore.ScheduleEntry{ID: 1, NextRunAt: now.Add(1500 * time.Millisecond)})
	if l.sched.has(1) {
		t.Fatal("an occurrence past the window was scheduled")
	}
	l.setRunning(2, false)
	l.sched.set(2, now.Add(20*time.Millisecond))
	// The reload read both rows before that, and job 3's.
	l.applyWindow([]sqlstore.ScheduleEntry{{ID: 1, NextRunAt: now}, {ID: 2, NextRunAt: now}, {ID: 3, NextRunAt: now.Add(100 * time.Millisecond)}},
		now.Add(600*time.Millisecond), time.Now())
	l.setReading(false)
	want := map[int64]time.Time{1: now.Add(1500 * time.Millisecond), 2: now.Add(20 * time.Millisecond), 3: now.Add(100 * time.Millisecond)}
	for id, at := range want {
		p, ok := l.sched.pos[id]
		if !ok {
			t.Errorf("job %d is not scheduled, want at %s", id, at.Format("05.000"))
			continue
		}
		if got := l.sched.items[p].next; !got.Equal(at) {
			t.Errorf("job %d scheduled at %s, want %s", id, got.Format("05.000"), at.Format("05.000"))
		}
	}
	if l.sched.Len() != len(want) {
		t.Errorf("%d entries scheduled, want %d", l.sched.Len(), len(want))
	}
}
