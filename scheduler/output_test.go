package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/scheduler"
)

func TestTailOutput(t *testing.T) {
	for _, tc := range []struct {
		in    string
		limit int
		want  string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"0123456789abc", 10, "[… 3 bytes dropped]\n3456789abc"},
		// A cut inside a character moves to the next one.
		{"aé" + strings.Repeat("x", 8), 9, "[… 3 bytes dropped]\n" + strings.Repeat("x", 8)},
		{"anything", 0, ""},
		{"anything", -1, ""},
	} {
		if got := scheduler.TailOutput(tc.in, tc.limit); got != tc.want {
			t.Errorf("TailOutput(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
		}
	}
	// Outside a run SetOutput does nothing and the limit is 0.
	scheduler.SetOutput(context.Background(), "lost")
	if n := scheduler.OutputLimit(context.Background()); n != 0 {
		t.Errorf("OutputLimit outside a run = %d", n)
	}
}

// TestRunOutput: what a handler hands over with SetOutput is stored with its
// run (the tail, marked, beyond OutputLimit), on success and failure; a
// handler that sets none — every library job written before output
// existed — stores none; OutputLimit < 0 keeps nothing.
func TestRunOutput(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		handle := func(ctx context.Context, r sqlease.Run) error {
			switch {
			case strings.HasPrefix(r.Job, "says"):
				scheduler.SetOutput(ctx, "first")
				scheduler.SetOutput(ctx, "hello from "+r.Job) // the last one counts
			case strings.HasPrefix(r.Job, "long"):
				if scheduler.OutputLimit(ctx) != 32 {
					return errors.New("limit not 32")
				}
				scheduler.SetOutput(ctx, strings.Repeat("a", 68)+strings.Repeat("z", 32))
			case strings.HasPrefix(r.Job, "fails"):
				scheduler.SetOutput(ctx, "why it failed")
				return errors.New("exit status 3")
			}
			return nil
		}
		store := newStore(t)
		s := newSched(t, scheduler.Config{Store: store, Holder: "w1", Handler: handle, OutputLimit: 32})
		want := map[string]string{
			"says": "hello from says", "quiet": "", "fails": "why it failed",
			"long": "[… 68 bytes dropped]\n" + strings.Repeat("z", 32),
		}
		for name := range want {
			// One attempt: a retry of "fails" (after about 1 s) would make
			// a second run, which finished never counts, when the waits
			// for the other jobs take that long (it did once, on a
			// loaded machine).
			if _, _, err := s.Create(ctx, sqlease.Job{Name: name, Retry: sqlease.Retry{MaxAttempts: 1}}); err != nil {
				t.Fatal(err)
			}
		}
		stop := runClaim(t, s)
		finished := func(name string) (sqlease.Run, bool) {
			runs, err := s.Runs(ctx, name, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(runs) != 1 {
				return sqlease.Run{}, false
			}
			return runs[0], runs[0].Outcome != sqlease.OutcomeRunning
		}
		for name, out := range want {
			dbtest.WaitFor(t, 20*time.Second, name+" to finish", func() bool { _, ok := finished(name); return ok })
			if r, _ := finished(name); r.Output != out {
				t.Errorf("%s: output %q, want %q (outcome %s)", name, r.Output, out, r.Outcome)
			}
		}
		stop()

		off := newSched(t, scheduler.Config{Store: store, Holder: "w2", Handler: handle, OutputLimit: -1})
		if _, _, err := off.Create(ctx, sqlease.Job{Name: "says-off"}); err != nil {
			t.Fatal(err)
		}
		runClaim(t, off)
		dbtest.WaitFor(t, 20*time.Second, "says-off to finish", func() bool { _, ok := finished("says-off"); return ok })
		if r, _ := finished("says-off"); r.Output != "" {
			t.Errorf("OutputLimit -1 kept %q", r.Output)
		}
	})
}

// TestDeposedLeaderKeepsNoOutput: a leader deposed while its run executes —
// it has not noticed yet, its gate still opens — writes its run's outcome
// and output through the lease fence, which refuses them: the ledger keeps
// the run running, with no output, for the next leader to retry.
func TestDeposedLeaderKeepsNoOutput(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		created(t, st, sqlease.Job{Name: "deposed"})
		// Long enough for the leader to claim the run on a loaded machine
		// (a lease that ended first fenced the claim out, no run started,
		// and the test waited for it until the package's timeout).
		old, err := st.Acquire(ctx, "lead", "old", 1500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		taken := make(chan struct{})
		handle := func(ctx context.Context, r sqlease.Run) error {
			scheduler.SetOutput(ctx, "from the deposed leader")
			// Another holder takes the lease over while the run executes.
			dbtest.WaitFor(t, 10*time.Second, "the lease to be taken over", func() bool {
				_, err := st.Acquire(context.Background(), "lead", "new", time.Minute)
				return err == nil
			})
			close(taken)
			return nil
		}
		finished := make(chan sqlease.Outcome, 1)
		s := newSched(t, scheduler.Config{Store: st, Handler: handle, Observer: finishObserver(finished)})
		gate := &settledGate{st: st, tok: old.Token()} // it does not notice
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Lead(lctx, gate, old.Token()) }()
		t.Cleanup(func() { cancel(); <-done })

		select {
		case <-taken:
		case <-time.After(20 * time.Second):
			t.Fatal("the run did not start, or the lease was not taken over, within 20s")
		}
		select {
		case <-finished: // the finish write returned (refused)
		case <-time.After(10 * time.Second):
			t.Fatal("the run's finish was not tried within 10s")
		}
		runs, err := s.Runs(ctx, "deposed", 10)
		if err != nil || len(runs) != 1 {
			t.Fatalf("runs: %v, %v", runs, err)
		}
		if runs[0].Outcome != sqlease.OutcomeRunning || runs[0].Output != "" {
			t.Errorf("the deposed leader's finish was kept: outcome %s, output %q", runs[0].Outcome, runs[0].Output)
		}
	})
}

// finishObserver reports each run's finish write (written or refused).
type finishObserver chan<- sqlease.Outcome

func (f finishObserver) RunFinished(_ string, o sqlease.Outcome, _ time.Duration) {
	select {
	case f <- o:
	default:
	}
}
