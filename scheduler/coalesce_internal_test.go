package scheduler

import (
	"testing"
	"time"
)

// TestScheduleHoldFor: the due entries wait for those falling due within
// claimCoalesce of the earliest (one claim takes them together), never
// longer, and a backlog — the earliest due claimCoalesce ago or more, or
// more than maxCoalesceLook entries within reach — waits for nothing.
func TestScheduleHoldFor(t *testing.T) {
	t0 := time.Now()
	ms := func(f float64) time.Time { return t0.Add(time.Duration(f * float64(time.Millisecond))) }
	sched := func(at ...time.Time) *schedule {
		s := newSchedule()
		for i, a := range at {
			s.set(int64(i+1), a)
		}
		return s
	}
	for _, c := range []struct {
		name string
		s    *schedule
		now  time.Time
		want time.Duration
	}{
		{"alone", sched(ms(0)), ms(0.1), 0},
		{"next within reach", sched(ms(0), ms(0.6), ms(5)), ms(0.1), 500 * time.Microsecond},
		{"the latest within reach", sched(ms(0.9), ms(0), ms(0.5), ms(1.2)), ms(0.2), 700 * time.Microsecond},
		{"next out of reach", sched(ms(0), ms(1.5)), ms(0.1), 0},
		{"all due already", sched(ms(0), ms(0.3), ms(0.6)), ms(0.7), 0},
		{"earliest waited its share", sched(ms(0), ms(1.4)), ms(1), 0},
		{"overdue backlog", sched(ms(-5), ms(-4), ms(0.5)), ms(0), 0},
	} {
		if got := c.s.holdFor(c.now); max(got, 0) != c.want {
			t.Errorf("%s: holdFor = %s, want %s", c.name, got, c.want)
		}
	}
	// Many within reach: claimed at once, however the heap holds them.
	var at []time.Time
	for i := range maxCoalesceLook + 1 {
		at = append(at, ms(float64(i)/float64(maxCoalesceLook+1)))
	}
	if got := sched(at...).holdFor(ms(0.01)); got > 0 {
		t.Errorf("%d entries within reach: holdFor = %s, want 0", len(at), got)
	}
	if got := sched(at[:maxCoalesceLook]...).holdFor(ms(0.01)); got <= 0 {
		t.Errorf("%d entries within reach: holdFor = %s, want the wait for the latest", maxCoalesceLook, got)
	}
}
