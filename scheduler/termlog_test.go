package scheduler_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/internal/syncbuf"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// A claim-mode worker's term that ends with a run in flight logs
// worker_term_ended_cancelling_runs, not shutdown_cancelling_runs: the node
// is not shutting down, and the run was cancelled when the term ended, not
// after ShutdownTimeout. A run slow to return after its cancellation (here
// longer than ShutdownTimeout) used to be reported as a shutdown.
func TestWorkerTermEndIsNotAShutdown(t *testing.T) {
	st := dbtest.SQLite(t)
	out := cancelledRunLog(t, st, 100*time.Millisecond, func(ctx context.Context, s *scheduler.Scheduler) error {
		l, err := st.Acquire(ctx, sqlstore.WorkerLeasePrefix+"w", "w", time.Minute)
		if err != nil {
			return err
		}
		return s.Work(ctx, l.Token(), trustGate{l.Token()})
	})
	if strings.Contains(out, "shutdown_cancelling_runs") {
		t.Errorf("a term's end was logged as a shutdown:\n%s", out)
	}
	if !strings.Contains(out, "msg=worker_term_ended_cancelling_runs runs=1") {
		t.Errorf("no worker_term_ended_cancelling_runs runs=1 in the log:\n%s", out)
	}
}

// Under Run, the end of its context is a shutdown: runs get
// ShutdownTimeout, then shutdown_cancelling_runs cancels them.
func TestShutdownCancellingRuns(t *testing.T) {
	out := cancelledRunLog(t, dbtest.SQLite(t), 0, func(ctx context.Context, s *scheduler.Scheduler) error { return s.Run(ctx) })
	if !strings.Contains(out, "msg=shutdown_cancelling_runs") || strings.Contains(out, "worker_term_ended") {
		t.Errorf("want shutdown_cancelling_runs only:\n%s", out)
	}
}

// cancelledRunLog creates the job "long" on st, whose run waits for its
// context to end and then takes slow more to return, dispatches it with
// run (worker "w", ShutdownTimeout 10 ms) until the run started, ends
// run's context and returns what the scheduler logged.
func cancelledRunLog(t *testing.T, st *sqlstore.Store, slow time.Duration, run func(ctx context.Context, s *scheduler.Scheduler) error) string {
	t.Helper()
	ctx := context.Background()
	var logs syncbuf.Buffer
	started := make(chan struct{}, 1)
	s := newSched(t, scheduler.Config{Store: st, Holder: "w", ShutdownTimeout: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Handler: func(ctx context.Context, r sqlease.Run) error {
			started <- struct{}{}
			<-ctx.Done()
			time.Sleep(slow) // slow to stop
			return ctx.Err()
		}})
	if _, _, err := s.Create(ctx, sqlease.Job{Name: "long"}); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(rctx, s) }()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("dispatch returned before the job started: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not start")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return logs.String()
}
