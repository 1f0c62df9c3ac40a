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
// again (due): that wait would hold back the job's next occurrence, so a
// backlog drained at one occurrence per linger. A run finishing during a
// linger that is due ends it: both go in one write. The linger here is an
// hour, so the test counts writes rather than timing them.
func TestFinisherDoesNotLingerForADueJob(t *testing.T) {
	var mu sync.Mutex
	var groups [][]int64
	direct := func(_ context.Context, reqs []sqlstore.FinishReq) ([]bool, error) {
		mu.Lock()
		defer mu.Unlock()
		var ids []int64
		for _, r := range reqs {
			ids = append(ids, r.Lock.JobID)
		}
		groups = append(groups, ids)
		done := make([]bool, len(reqs))
		for i := range done {
			done[i] = true
		}
		return done, nil
	}
	fence := func(context.Context, func(*sql.Tx) error) error { return errors.New("the direct write failed") }
	f := startFinisherDirect(nil, 8, fence, direct, time.Hour, nopObs{})
	written := make(chan int64, 4)
	item := func(id int64, due bool) finishItem {
		return finishItem{req: sqlstore.FinishReq{Lock: sqlstore.Lock{JobID: id}, Run: sqlease.Run{Job: "j"}, Finish: sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}},
			log: &runLog{l: slog.New(slog.DiscardHandler)}, next: time.Now(), due: due, done: func(time.Time) { written <- id }}
	}
	wait := func(want int64) {
		t.Helper()
		select {
		case id := <-written:
			if id != want {
				t.Fatalf("run %d written, want %d", id, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d not written (lingering for an hour)", want)
		}
	}
	f.finish(item(1, true), nil)
	wait(1)
	// One not due lingers; a due one joins it and ends the linger.
	f.finish(item(2, false), nil)
	// Time for the writer to begin its linger (if it has not, the due
	// run still joins the group before it is taken: the test passes
	// either way, and checks the linger's end only when it has begun).
	time.Sleep(100 * time.Millisecond)
	f.finish(item(3, true), nil)
	wait(2)
	wait(3)
	f.stop()
	mu.Lock()
	defer mu.Unlock()
	if len(groups) != 2 || len(groups[0]) != 1 || len(groups[1]) != 2 {
		t.Fatalf("groups written %v, want [[1] [2 3]]", groups)
	}
}
