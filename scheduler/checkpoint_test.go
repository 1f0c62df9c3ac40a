package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/scheduler"
)

// progress is what the handlers below checkpoint.
type progress struct {
	Done int `json:"done"`
}

// TestCheckpointResumes, in claim and leader dispatch: attempt 1 saves two
// checkpoints and fails; attempt 2 gets the last one as Run.Checkpoint,
// saves none and fails; attempt 3 still gets attempt 1's, and succeeds. A
// first attempt gets none. The runs listing shows each attempt's own.
func TestCheckpointResumes(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		for _, mode := range []string{"claim", "leader"} {
			t.Run(mode, func(t *testing.T) {
				ctx := context.Background()
				job := "resume-" + mode
				rec := &recorder{fn: func(ctx context.Context, r sqlease.Run) error {
					switch r.Attempt {
					case 1:
						for _, p := range []progress{{3}, {5}} {
							if err := scheduler.Checkpoint(ctx, p); err != nil {
								t.Errorf("Checkpoint(%v): %v", p, err)
							}
						}
						return errors.New("crashed half way")
					case 2:
						return errors.New("crashed again before any progress")
					}
					return nil
				}}
				st := newStore(t)
				s := newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: rec.handle, RefreshInterval: 100 * time.Millisecond})
				if mode == "claim" {
					runClaim(t, s)
				} else {
					e := lead(t, st, &s, "leader")
					dbtest.WaitFor(t, 10*time.Second, "leadership", e.IsLeader)
				}
				if _, _, err := s.Create(ctx, sqlease.Job{Name: job, Retry: sqlease.Retry{MaxAttempts: 3, Backoff: 10 * time.Millisecond}}); err != nil {
					t.Fatal(err)
				}
				dbtest.WaitFor(t, 20*time.Second, "3 attempts", func() bool { return rec.count() >= 3 })
				got := rec.snapshot()
				if got[0].Checkpoint != nil {
					t.Errorf("attempt 1 got checkpoint %s, want none", got[0].Checkpoint)
				}
				for _, r := range got[1:3] {
					var p progress
					if err := json.Unmarshal(r.Checkpoint, &p); err != nil || p.Done != 5 {
						t.Errorf("attempt %d got checkpoint %s, want attempt 1's last, {\"done\":5}", r.Attempt, r.Checkpoint)
					}
				}
				dbtest.WaitFor(t, 10*time.Second, "the ledger", func() bool {
					runs, _ := s.Runs(ctx, job, 10)
					return len(runs) == 3 && runs[0].Outcome == sqlease.OutcomeSucceeded
				})
				runs, _ := s.Runs(ctx, job, 10)
				if string(runs[2].Checkpoint) != `{"done":5}` || runs[1].Checkpoint != nil || runs[0].Checkpoint != nil {
					t.Errorf("listed checkpoints, newest first: %s, %s, %s; want none, none, {\"done\":5}", runs[0].Checkpoint, runs[1].Checkpoint, runs[2].Checkpoint)
				}
			})
		}
	})
}

// TestCheckpointRefusedWhenNotCurrent: a claim-mode run whose job lock was
// taken from it (its lock epoch moved on, as a reclaim does) is refused by
// the database, and a leader-mode run whose leadership ended by its gate;
// both with ErrLeaseLost, and neither changes the saved checkpoint.
// Outside a run, and for a value that is no JSON, Checkpoint refuses with
// ErrInvalidConfig.
func TestCheckpointRefusedWhenNotCurrent(t *testing.T) {
	ctx := context.Background()
	if err := scheduler.Checkpoint(ctx, 1); !errors.Is(err, sqlease.ErrInvalidConfig) {
		t.Errorf("Checkpoint outside a run = %v, want ErrInvalidConfig", err)
	}

	t.Run("claim", func(t *testing.T) {
		st := dbtest.SQLite(t)
		refused := make(chan error, 1)
		taken := make(chan struct{})
		handler := func(ctx context.Context, r sqlease.Run) error {
			if err := scheduler.Checkpoint(ctx, json.RawMessage(`"mine"`)); err != nil {
				t.Errorf("Checkpoint while current: %v", err)
			}
			if err := scheduler.Checkpoint(ctx, func() {}); !errors.Is(err, sqlease.ErrInvalidConfig) {
				t.Errorf("Checkpoint(func) = %v, want ErrInvalidConfig", err)
			}
			taken <- struct{}{}
			<-taken
			refused <- scheduler.Checkpoint(ctx, json.RawMessage(`"deposed"`))
			<-ctx.Done()
			return ctx.Err()
		}
		s := newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: handler, HeartbeatInterval: 100 * time.Millisecond})
		if _, _, err := s.Create(ctx, sqlease.Job{Name: "deposed", LockTimeout: 2 * time.Second}); err != nil {
			t.Fatal(err)
		}
		runClaim(t, s)
		<-taken
		// Another worker's reclaim, as the database sees it: the lock's
		// epoch moves on.
		if _, err := st.DB().ExecContext(ctx, `UPDATE sqlease_jobs SET lock_epoch = lock_epoch + 1, locked_by = 'thief' WHERE name = 'deposed'`); err != nil {
			t.Fatal(err)
		}
		taken <- struct{}{}
		if err := <-refused; !errors.Is(err, sqlease.ErrLeaseLost) {
			t.Errorf("Checkpoint after the lock was taken = %v, want ErrLeaseLost", err)
		}
		runs, err := s.Runs(ctx, "deposed", 10)
		if err != nil || len(runs) != 1 || string(runs[0].Checkpoint) != `"mine"` {
			t.Errorf("runs %+v, %v: want one with the checkpoint saved while current", runs, err)
		}
	})

	t.Run("leader", func(t *testing.T) {
		st := dbtest.SQLite(t)
		saved := make(chan struct{})
		refused := make(chan error, 1)
		handler := func(ctx context.Context, r sqlease.Run) error {
			if err := scheduler.Checkpoint(ctx, json.RawMessage(`"mine"`)); err != nil {
				t.Errorf("Checkpoint while leading: %v", err)
			}
			close(saved)
			<-ctx.Done()
			refused <- scheduler.Checkpoint(ctx, json.RawMessage(`"deposed"`))
			return ctx.Err()
		}
		var s *scheduler.Scheduler
		s = newSched(t, scheduler.Config{Store: st, Handler: handler, RefreshInterval: 100 * time.Millisecond})
		var e *election.Elector
		e, err := election.New(election.Config{Store: st, HolderID: "leader",
			LeaseDuration: 2 * time.Second, RenewInterval: 300 * time.Millisecond, AcquireInterval: 50 * time.Millisecond,
			OnStartedLeading: func(ctx context.Context, tok sqlease.Token) { _ = s.Lead(ctx, e, tok) }})
		if err != nil {
			t.Fatal(err)
		}
		ectx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = e.Run(ectx) }()
		t.Cleanup(func() { stop(); <-done })
		if _, _, err := s.Create(ctx, sqlease.Job{Name: "deposed"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-saved:
		case <-time.After(10 * time.Second):
			t.Fatal("no run started")
		}
		stop() // leadership ends: the run is cancelled
		<-done
		if err := <-refused; !errors.Is(err, sqlease.ErrLeaseLost) {
			t.Errorf("Checkpoint after leadership ended = %v, want ErrLeaseLost", err)
		}
		runs, err := s.Runs(ctx, "deposed", 10)
		if err != nil || len(runs) != 1 || string(runs[0].Checkpoint) != `"mine"` {
			t.Errorf("runs %+v, %v: want one with the checkpoint saved while leading", runs, err)
		}
	})
}
