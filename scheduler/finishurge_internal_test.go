package scheduler

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// TestFinisherDoesNotLingerForADueJob: the leader's finisher lets a small
// group wait for more runs (linger), but not a finish whose job is due
// again (by passed): that wait would hold back the job's next occurrence,
// so a backlog drained at one occurrence per linger; nor past finishLead
// before a queued run's job falls due; nor once finishLingerBelow runs are
// queued. A run finishing during a linger that is due ends it: both go in
// one write. The linger here is an hour,
// so the test counts writes rather than timing them. Each case has a
// finisher of its own: a run queued while the writer still works through
// an earlier group is taken with it, linger or not (CI once saw the second
// case's first run written alone so, right after the first case's write).
func TestFinisherDoesNotLingerForADueJob(t *testing.T) {
	type finisherUnderTest struct {
		f       *finisher
		mu      sync.Mutex
		groups  [][]int64
		written chan int64
	}
	start := func() *finisherUnderTest {
		u := &finisherUnderTest{written: make(chan int64, finishLingerBelow)}
		direct := func(_ context.Context, reqs []sqlstore.FinishReq) ([]bool, error) {
			u.mu.Lock()
			defer u.mu.Unlock()
			var ids []int64
			for _, r := range reqs {
				ids = append(ids, r.Lock.JobID)
			}
			u.groups = append(u.groups, ids)
			done := make([]bool, len(reqs))
			for i := range done {
				done[i] = true
			}
			return done, nil
		}
		fence := func(context.Context, func(*sql.Tx) error) error { return errors.New("the direct write failed") }
		u.f = startFinisherDirect(nil, finishLingerBelow, fence, direct, time.Hour, nopObs{})
		return u
	}
	itemBy := func(u *finisherUnderTest, id int64, by time.Time) finishItem {
		return finishItem{req: sqlstore.FinishReq{Lock: sqlstore.Lock{JobID: id}, Run: sqlease.Run{Job: "j"}, Finish: sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}},
			log: &runLog{l: slog.New(slog.DiscardHandler)}, next: time.Now(), by: by, done: func(time.Time) { u.written <- id }}
	}
	item := func(u *finisherUnderTest, id int64, due bool) finishItem {
		var by time.Time // not due: no next occurrence known
		if due {
			by = time.Now()
		}
		return itemBy(u, id, by)
	}
	wait := func(u *finisherUnderTest, want int64) {
		t.Helper()
		select {
		case id := <-u.written:
			if id != want {
				t.Fatalf("run %d written, want %d", id, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d not written (lingering for an hour)", want)
		}
	}
	groups := func(u *finisherUnderTest) [][]int64 {
		u.f.stop()
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.groups
	}

	// A due run alone is written at once.
	a := start()
	a.f.finish(item(a, 1, true), nil)
	wait(a, 1)
	if g := groups(a); len(g) != 1 || len(g[0]) != 1 {
		t.Fatalf("groups written %v, want [[1]]", g)
	}

	// One not due lingers; a due one joins it and ends the linger.
	b := start()
	b.f.finish(item(b, 2, false), nil)
	// Time for the writer to begin its linger (if it has not, the due
	// run still joins the group before it is taken: the test passes
	// either way, and checks the linger's end only when it has begun).
	time.Sleep(100 * time.Millisecond)
	b.f.finish(item(b, 3, true), nil)
	wait(b, 2)
	wait(b, 3)
	if g := groups(b); len(g) != 1 || len(g[0]) != 2 {
		t.Fatalf("groups written %v, want [[2 3]]", g)
	}

	// One whose job falls due in 300 ms lingers until finishLead before
	// that (a timer never fires early), not an hour; one queued
	// meanwhile joins it.
	c := start()
	by := time.Now().Add(300 * time.Millisecond)
	c.f.finish(itemBy(c, 4, by), nil)
	time.Sleep(100 * time.Millisecond)
	c.f.finish(item(c, 5, false), nil)
	wait(c, 4)
	if early := by.Add(-finishLead).Sub(time.Now()); early > 0 {
		t.Fatalf("run 4 written %s before its linger's end (%s before its job falls due)", early, finishLead)
	}
	wait(c, 5)
	if g := groups(c); len(g) != 1 || len(g[0]) != 2 {
		t.Fatalf("groups written %v, want [[4 5]]", g)
	}

	// finishLingerBelow runs queued, none due, end the linger: a
	// backlog's runs, which finish together, do not wait for more.
	d := start()
	d.f.finish(item(d, 10, false), nil)
	time.Sleep(100 * time.Millisecond) // the writer begins its linger
	for id := int64(1); id < finishLingerBelow; id++ {
		d.f.finish(item(d, 10+id, false), nil)
	}
	for id := range int64(finishLingerBelow) {
		wait(d, 10+id)
	}
	d.f.stop()
}

// TestFinisherLingerEndsWhenItsQueueIsFull: with fewer places for pending
// finishes than finishLingerBelow (a small MaxConcurrent), a full queue
// ends the linger. Otherwise the next run to finish waited for a place
// holding its execution slot, and with every slot so held no claim was
// made until the linger ran out: a backlog drained at one group per
// linger. The linger here is an hour.
func TestFinisherLingerEndsWhenItsQueueIsFull(t *testing.T) {
	const places = 3
	written := make(chan int64, places)
	direct := func(_ context.Context, reqs []sqlstore.FinishReq) ([]bool, error) {
		done := make([]bool, len(reqs))
		for i := range done {
			done[i] = true
		}
		return done, nil
	}
	fence := func(context.Context, func(*sql.Tx) error) error { return errors.New("the direct write failed") }
	f := startFinisherDirect(nil, places, fence, direct, time.Hour, nopObs{})
	defer f.stop()
	for id := range int64(places) {
		f.finish(finishItem{req: sqlstore.FinishReq{Lock: sqlstore.Lock{JobID: id}, Run: sqlease.Run{Job: "j"}, Finish: sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}},
			log: &runLog{l: slog.New(slog.DiscardHandler)}, done: func(time.Time) { written <- id }}, nil)
		if id == 0 {
			time.Sleep(100 * time.Millisecond) // the writer begins its linger
		}
	}
	for range places {
		select {
		case <-written:
		case <-time.After(10 * time.Second):
			t.Fatalf("a full queue of %d finishes not written (lingering for an hour)", places)
		}
	}
}

// TestFinisherRunsFinishingDuringAWriteLinger: a run that finishes while
// the writer writes a group is written at once only when enough for a
// group are queued; alone it lingers like any other, and the run finishing
// next joins it. Written at once, a trickle's statements alternated
// between a group and a group of one (6.5 runs per finish statement at
// 1,000 runs a second with a 10 ms linger; 11 since).
func TestFinisherRunsFinishingDuringAWriteLinger(t *testing.T) {
	var mu sync.Mutex
	var groups [][]int64
	writing, release := make(chan struct{}, 1), make(chan struct{})
	written := make(chan int64, 3)
	direct := func(_ context.Context, reqs []sqlstore.FinishReq) ([]bool, error) {
		mu.Lock()
		var ids []int64
		for _, r := range reqs {
			ids = append(ids, r.Lock.JobID)
		}
		groups = append(groups, ids)
		first := len(groups) == 1
		mu.Unlock()
		if first {
			writing <- struct{}{}
			<-release // the first write is slow
		}
		done := make([]bool, len(reqs))
		for i := range done {
			done[i] = true
		}
		return done, nil
	}
	fence := func(context.Context, func(*sql.Tx) error) error { return errors.New("the direct write failed") }
	f := startFinisherDirect(nil, finishLingerBelow, fence, direct, time.Second, nopObs{})
	defer f.stop()
	item := func(id int64, by time.Time) finishItem {
		return finishItem{req: sqlstore.FinishReq{Lock: sqlstore.Lock{JobID: id}, Run: sqlease.Run{Job: "j"}, Finish: sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}},
			log: &runLog{l: slog.New(slog.DiscardHandler)}, by: by, done: func(time.Time) { written <- id }}
	}
	f.finish(item(1, time.Now()), nil) // due: written at once
	<-writing
	f.finish(item(2, time.Time{}), nil) // finishes during the write
	close(release)
	time.Sleep(50 * time.Millisecond)
	f.finish(item(3, time.Time{}), nil) // finishes within run 2's linger
	for range 3 {
		select {
		case <-written:
		case <-time.After(10 * time.Second):
			t.Fatal("a finish not written")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(groups) != 2 || len(groups[1]) != 2 {
		t.Fatalf("groups written %v, want [[1] [2 3]]", groups)
	}
}
