package scheduler

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/sqlstore"
)

type nopObs struct{}

func (nopObs) RunFinished(string, sqlease.Outcome, time.Duration) {}

// TestFinisherIsolatesBadRun: a group finish that fails for one run's sake
// (here an outcome the column refuses; before CleanText, a NUL byte in one
// error on PostgreSQL) is written again one run at a time, so the others
// are recorded and their jobs released, and only the bad run is logged as
// unrecorded — not left running with the rest until their locks go stale.
func TestFinisherIsolatesBadRun(t *testing.T) {
	ctx := context.Background()
	st := dbtest.Postgres(t)
	if !st.Batched() {
		t.Fatal("PostgreSQL must finish runs in groups")
	}
	names := []string{"a", "bad", "c"}
	for _, n := range names {
		if _, _, err := st.InsertJob(ctx, sqlstore.StoredJob{Job: sqlease.Job{Name: n, MissedRuns: sqlease.RunOnce,
			Retry: sqlease.Retry{MaxAttempts: 1}, LockTimeout: time.Minute}, SpecHash: n}, time.Now().Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	claimed, err := st.ClaimDue(ctx, "w", 10)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claim: %v, %d jobs", err, len(claimed))
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	s := &Scheduler{log: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))}
	f := startFinisher(st, 10, unfenced, nopObs{})
	var wg sync.WaitGroup
	results := map[string]time.Time{}
	var rmu sync.Mutex
	var items []finishItem
	for i := range claimed {
		c := &claimed[i]
		r, err := st.StartRun(ctx, nil, c.Lock, c.Name, c.NextRunAt, 1, c.Lock.Epoch)
		if err != nil {
			t.Fatal(err)
		}
		fin := sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}
		if c.Name == "bad" {
			fin.Outcome = sqlease.Outcome(strings.Repeat("x", 40)) // longer than the column
		}
		name := c.Name
		wg.Add(1)
		items = append(items, finishItem{req: sqlstore.FinishReq{Lock: c.Lock, Run: r, Finish: fin}, log: s.runLogger(c),
			next: time.Unix(1, 0), done: func(next time.Time) {
				rmu.Lock()
				results[name] = next
				rmu.Unlock()
				wg.Done()
			}})
	}
	// Queue all three before the writer looks, so that they form one group.
	f.mu.Lock()
	for _, it := range items {
		f.pending <- struct{}{}
		f.queue = append(f.queue, it)
	}
	f.mu.Unlock()
	f.kick <- struct{}{}
	wg.Wait()
	f.stop()

	for _, n := range []string{"a", "c"} {
		if results[n].IsZero() {
			t.Errorf("run of %s reported unwritten; its group's bad run must not take it down", n)
		}
		runs, err := st.Runs(ctx, n, 10)
		if err != nil || len(runs) != 1 || runs[0].Outcome != sqlease.OutcomeSucceeded {
			t.Errorf("runs of %s: %+v %v, want one succeeded", n, runs, err)
		}
		if j, _ := st.Job(ctx, n); j.LockedBy != "" {
			t.Errorf("job %s still locked after its finish: %+v", n, j)
		}
	}
	if !results["bad"].IsZero() {
		t.Error("the bad run reported written")
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if strings.Count(out, "run_finish_failed") != 1 || !strings.Contains(out, "job=bad") {
		t.Errorf("want exactly the bad run logged as run_finish_failed, got:\n%s", out)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
