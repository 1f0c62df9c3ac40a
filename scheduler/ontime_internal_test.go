package scheduler

import (
	"testing"
	"time"
)

// localDue turns a database time into this host's clock through the
// database's now of the same answer: a host clock minutes off the
// database's changes nothing (SPEC G4), and the instant is counted from
// the answer's arrival, so it is never early.
func TestLocalDueIgnoresHostClockSkew(t *testing.T) {
	got := time.Now()
	for _, skew := range []time.Duration{0, 7 * time.Minute, -42 * time.Minute} {
		dbNow := got.Add(skew).Add(-3 * time.Millisecond) // the database read its clock before the answer arrived
		next := dbNow.Add(250 * time.Millisecond)
		at, ok := localDue(next, dbNow, got)
		if !ok || !at.Equal(got.Add(250*time.Millisecond)) {
			t.Errorf("skew %s: wake at %s after the answer, want 250ms", skew, at.Sub(got))
		}
	}
	if _, ok := localDue(time.Time{}, got, got); ok {
		t.Error("no next occurrence made an instant")
	}
}

// dueHints gives its instants earliest first, drops those a claim covers,
// and pokes the loop only for an instant earlier than every one it holds.
func TestDueHints(t *testing.T) {
	h := newDueHints()
	base := time.Now()
	h.add(base.Add(30 * time.Millisecond))
	select {
	case <-h.poke:
	default:
		t.Fatal("the first instant did not poke the loop")
	}
	h.add(base.Add(50 * time.Millisecond))
	select {
	case <-h.poke:
		t.Fatal("a later instant poked the loop")
	default:
	}
	h.add(base.Add(10 * time.Millisecond))
	select {
	case <-h.poke:
	default:
		t.Fatal("an earlier instant did not poke the loop")
	}
	if f, ok := h.first(); !ok || !f.Equal(base.Add(10*time.Millisecond)) {
		t.Fatalf("first = %s, want +10ms", f.Sub(base))
	}
	if h.take(base) {
		t.Error("take before every instant dropped one")
	}
	if !h.take(base.Add(30 * time.Millisecond)) {
		t.Error("take at +30ms dropped nothing")
	}
	if f, ok := h.first(); !ok || !f.Equal(base.Add(50*time.Millisecond)) {
		t.Fatalf("first after take = %s, want +50ms", f.Sub(base))
	}
}
