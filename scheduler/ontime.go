package scheduler

import (
	"container/heap"
	"sync"
	"time"
)

// On-time claims.
//
// A claim-mode worker polls every PollInterval, but it often knows, or can
// learn cheaply, when a job falls due, and then claims at that instant
// instead of up to a poll interval later:
//
//   - the finish of one of its runs writes the job's next occurrence
//     (sqlstore.Finish.Next), which the worker computed itself: a periodic
//     job's next start, or — for a job that fell behind (run_all) — an
//     occurrence due already, which it claims again at once rather than at
//     the next poll (dueHints);
//   - after a claim that took jobs, or was made at an instant it knew of,
//     or followed a change, it asks the database when the earliest job
//     still to come falls due (Store.NextDue: one index lookup) and sleeps
//     until then at most;
//   - a change — PostgreSQL's job change feed (Config.Changes), or this
//     Scheduler's own Create, Resume or Trigger — makes it claim at once
//     and ask again;
//   - where the dialect's claim can tell in its own statements
//     (JobQueries.ClaimPeek: SQLite, MySQL), every claim — an idle poll's
//     too — says when the next job falls due, and the worker sleeps until
//     then at most: a job created by another process, which no feed
//     announces, runs when it falls due if a poll comes between its
//     creation and its time. (On SQLite the claim then reads before it
//     writes, unless the last claim came back full; see
//     Store.ClaimAndStartNext.)
//
// An idle worker (its claims find nothing, nothing it knows of falls due
// before its next poll) makes the same one claim per PollInterval as
// before: no statement is added while nothing happens (on SQLite the idle
// claim is a read now, not an UPDATE). A job created elsewhere, without a
// change feed, due sooner than the worker's next poll is found at that
// poll at worst, as before.
//
// Every instant is a wake-up hint only. Database times are turned into
// this host's clock through the database's now returned by the same
// statement (a claim's now, NextDue's span), counted from when the answer
// arrived, so the estimate is late by at most the answer's trip, never
// early by a host clock's skew. Whether a job is due is still decided by
// the claim alone, in database time, in its one conditional statement
// (SPEC G3, G4): a hint that comes early claims nothing, and one that is
// lost costs at most a poll interval.

// maxDueHints bounds the instants a worker keeps: past it, later ones are
// left to NextDue and the polls.
const maxDueHints = 1 << 16

// dueHints holds the local instants at which this worker knows a job of its
// own runs falls due, earliest first. add may be called from any goroutine;
// the claim loop reads them.
type dueHints struct {
	mu sync.Mutex
	h  timeHeap
	// poke is signalled when an instant earlier than every one held
	// arrives, so that the loop can wake sooner than it planned.
	poke chan struct{}
}

func newDueHints() *dueHints { return &dueHints{poke: make(chan struct{}, 1)} }

// add records that a job falls due at local instant t.
func (d *dueHints) add(t time.Time) {
	d.mu.Lock()
	first := len(d.h) == 0 || t.Before(d.h[0])
	if len(d.h) < maxDueHints {
		heap.Push(&d.h, t)
	}
	d.mu.Unlock()
	if first {
		select {
		case d.poke <- struct{}{}:
		default:
		}
	}
}

// first returns the earliest instant held.
func (d *dueHints) first() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.h) == 0 {
		return time.Time{}, false
	}
	return d.h[0], true
}

// take drops the instants at or before now and reports whether there were
// any: a claim made now covers them.
func (d *dueHints) take(now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	found := false
	for len(d.h) > 0 && !d.h[0].After(now) {
		heap.Pop(&d.h)
		found = true
	}
	return found
}

// timeHeap is a min-heap of instants (container/heap).
type timeHeap []time.Time

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h timeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *timeHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

// localDue turns next, a database time, into this host's clock, given the
// database's now at a claim (dbNow) and the local time its answer arrived
// (got): late by at most the claim's trip, never early by a clock skew.
// ok is false for no instant.
func localDue(next, dbNow, got time.Time) (time.Time, bool) {
	if next.IsZero() || dbNow.IsZero() || got.IsZero() {
		return time.Time{}, false
	}
	return got.Add(next.Sub(dbNow)), true
}

// wrote tells this Scheduler's claim loop that a write of its own API may
// have made a job due (Create, Resume, Trigger): it claims at once and asks
// when the next job falls due, as on a change notification. Without it a
// job created through this node on a database with no change feed
// (SQLite) would wait for the next poll.
func (s *Scheduler) wrote() {
	select {
	case s.localWrites <- struct{}{}:
	default:
	}
}
