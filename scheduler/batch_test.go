package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/internal/syncbuf"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// TestBatchStartFinishFenced checks the batch statements claim mode uses
// where the dialect has them (Store.Batched): every start and finish is
// conditional on its own job lock, an attempt starts once, the attempt count
// of a run in flight is the ledger's, and a run that was batch-started and
// then orphaned is reclaimed as a reclaim (its run abandoned, attempt 2).
func TestBatchStartFinishFenced(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		if !st.Batched() {
			t.Skip("this dialect starts and finishes runs one by one")
		}
		admin := newSched(t, scheduler.Config{Store: st, Holder: "admin"})
		for _, name := range []string{"a", "b", "c"} {
			if _, _, err := admin.Create(ctx, sqlease.Job{Name: name, LockTimeout: time.Second}); err != nil {
				t.Fatal(err)
			}
		}
		claimed, err := st.ClaimDue(ctx, "w", 10)
		if err != nil || len(claimed) != 3 {
			t.Fatalf("claim: %v, %d jobs", err, len(claimed))
		}
		reqs := make([]sqlstore.StartReq, len(claimed))
		for i, c := range claimed {
			if c.Reclaimed || c.Attempt != 0 {
				t.Fatalf("fresh claim of %s: reclaimed=%v attempt=%d", c.Name, c.Reclaimed, c.Attempt)
			}
			reqs[i] = sqlstore.StartReq{Lock: c.Lock, Job: c.Name, ScheduledFor: c.NextRunAt, Attempt: 1}
		}
		stale := reqs[1]
		stale.Lock.Epoch-- // a start under a lock that is no longer held
		started, err := st.StartRuns(ctx, nil, []sqlstore.StartReq{reqs[0], stale, reqs[2]})
		if err != nil || !started[0] || started[1] || !started[2] {
			t.Fatalf("StartRuns with one stale lock: %v %v, want [true false true]", started, err)
		}
		if again, err := st.StartRuns(ctx, nil, reqs[:1]); err != nil || again[0] {
			t.Fatalf("starting attempt 1 twice: %v %v, want not started", again, err)
		}
		if j, err := st.Job(ctx, reqs[0].Job); err != nil || j.Attempt != 1 {
			t.Fatalf("attempt count of the run in flight: %d %v, want 1 (from the ledger)", j.Attempt, err)
		}
		if runs, _ := st.Runs(ctx, reqs[1].Job, 10); len(runs) != 0 {
			t.Fatalf("the stale start wrote %+v", runs)
		}

		run := func(q sqlstore.StartReq) sqlease.Run {
			return sqlease.Run{JobID: q.Lock.JobID, Job: q.Job, ScheduledFor: q.ScheduledFor, Attempt: q.Attempt}
		}
		staleFin := sqlstore.FinishReq{Lock: reqs[0].Lock, Run: run(reqs[0]), Finish: sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}}
		staleFin.Lock.Holder = "someone-else"
		done, err := st.FinishRuns(ctx, nil, []sqlstore.FinishReq{staleFin,
			{Lock: reqs[2].Lock, Run: run(reqs[2]), Finish: sqlstore.Finish{Outcome: sqlease.OutcomeFailed, Error: "boom", Next: reqs[2].ScheduledFor, Attempt: 1, Backoff: time.Hour}}})
		if err != nil || done[0] || !done[1] {
			t.Fatalf("FinishRuns with one foreign lock: %v %v, want [false true]", done, err)
		}
		if runs, _ := st.Runs(ctx, reqs[0].Job, 10); len(runs) != 1 || runs[0].Outcome != sqlease.OutcomeRunning {
			t.Fatalf("a finish under a foreign lock changed the run: %+v", runs)
		}
		runs, _ := st.Runs(ctx, reqs[2].Job, 10)
		if len(runs) != 1 || runs[0].Outcome != sqlease.OutcomeFailed || runs[0].Error != "boom" {
			t.Fatalf("finished run: %+v", runs)
		}
		if j, _ := st.Job(ctx, reqs[2].Job); j.LockedBy != "" || j.Attempt != 1 || !j.NextRunAt.Equal(reqs[2].ScheduledFor) {
			t.Fatalf("job after a failed attempt to retry: %+v", j)
		}

		// Job a's worker dies with its batch-started run in flight: the next
		// claim after the lock timeout is a reclaim, which the scheduler
		// starts through StartRun (abandoning the orphan) as attempt 2.
		rec := &recorder{}
		runClaim(t, newSched(t, scheduler.Config{Store: newStore(t), Holder: "live", Handler: rec.handle}))
		dbtest.WaitFor(t, 20*time.Second, "the orphaned run to be reclaimed", func() bool {
			runs, _ := st.Runs(ctx, reqs[0].Job, 10)
			return len(runs) == 2 && runs[0].Outcome == sqlease.OutcomeSucceeded
		})
		runs, _ = st.Runs(ctx, reqs[0].Job, 10)
		if runs[0].Attempt != 2 || runs[1].Outcome != sqlease.OutcomeAbandoned || runs[1].Attempt != 1 {
			t.Fatalf("ledger of the reclaimed job: %+v", runs)
		}
		// The dead worker's late finish is fenced off.
		done, err = st.FinishRuns(ctx, nil, []sqlstore.FinishReq{{Lock: reqs[0].Lock, Run: run(reqs[0]), Finish: sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}}})
		if err != nil || done[0] {
			t.Fatalf("late finish of the orphan: %v %v, want not done", done, err)
		}
	})
}

// TestLeaderStartConflict covers leader dispatch when a start conflicts: an
// attempt of the due occurrence already in the ledger (as a crash between a
// start and its bookkeeping could leave) while the job row says none
// started. The leader must hold the job (for the stale-lock path) or run a
// later attempt — never run the recorded attempt twice, never loop on it.
func TestLeaderStartConflict(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		j := created(t, st, sqlease.Job{Name: "conflicted", LockTimeout: time.Minute})
		// Attempt 1 of the due occurrence exists, but the job says none
		// started: claim it, start attempt 1, and give the claim back with
		// the attempt count reset — the ledger keeps the run.
		claimed, err := st.ClaimDue(ctx, "ghost", 1)
		if err != nil || len(claimed) != 1 {
			t.Fatalf("claim: %v %d", err, len(claimed))
		}
		c := claimed[0]
		if _, err := st.StartRun(ctx, nil, c.Lock, c.Name, c.NextRunAt, 1, c.Lock.Epoch); err != nil {
			t.Fatal(err)
		}
		if err := st.FinishRun(ctx, nil, c.Lock, sqlease.Run{JobID: c.ID, Job: c.Name, ScheduledFor: c.NextRunAt, Attempt: 1},
			sqlstore.Finish{Outcome: sqlease.OutcomeFailed, Error: "ghost", Next: c.NextRunAt, Attempt: 0}); err != nil {
			t.Fatal(err)
		}
		if got, _ := st.Job(ctx, j.Name); got.Attempt > 1 {
			t.Fatalf("setup: attempt %d", got.Attempt)
		}

		rec := &recorder{}
		s := newSched(t, scheduler.Config{Store: st, Handler: rec.handle})
		e := lead(t, st, &s, "leader")
		dbtest.WaitFor(t, 10*time.Second, "leadership", e.IsLeader)
		dbtest.WaitFor(t, 10*time.Second, "the leader to run attempt 2 or to hold the job", func() bool {
			got, _ := st.Job(ctx, j.Name)
			return rec.count() > 0 || got.LockedBy == "leader"
		})
		time.Sleep(300 * time.Millisecond)
		for _, r := range rec.snapshot() {
			if r.Attempt == 1 {
				t.Fatalf("attempt 1 ran again: %+v", r)
			}
		}
		runs, _ := st.Runs(ctx, j.Name, 10)
		seen := map[int]bool{}
		for _, r := range runs {
			if seen[r.Attempt] {
				t.Fatalf("attempt %d twice in the ledger: %+v", r.Attempt, runs)
			}
			seen[r.Attempt] = true
		}
	})
}

// TestWarmChangesNothing checks that a follower's warm-up (Store.Warm)
// leaves jobs, runs and leases exactly as they were.
func TestWarmChangesNothing(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		created(t, st, sqlease.Job{Name: "still"})
		lease, err := st.Acquire(ctx, "lead", "someone", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		before, _ := st.Job(ctx, "still")
		for range 2 {
			if err := st.Warm(ctx); err != nil {
				t.Fatalf("Warm: %v", err)
			}
		}
		after, _ := st.Job(ctx, "still")
		if after.LastModifiedAt != before.LastModifiedAt || after.LockEpoch != before.LockEpoch || after.LockedBy != "" || after.Attempt != 0 {
			t.Fatalf("Warm changed the job: %+v -> %+v", before, after)
		}
		if runs, _ := st.Runs(ctx, "still", 10); len(runs) != 0 {
			t.Fatalf("Warm wrote runs: %+v", runs)
		}
		leases, err := st.Leases(ctx)
		if err != nil || len(leases) != 1 || leases[0].Epoch != lease.Epoch || leases[0].Holder != "someone" {
			t.Fatalf("leases after Warm: %+v %v", leases, err)
		}
	})
}

// TestTriggerWhileRunningConflicts: a trigger of a job that is running
// would be overwritten by the run's finish — lost without a word. It is
// refused with ErrConflict and changes nothing; once the run has finished,
// the trigger works and the job runs again.
func TestTriggerWhileRunningConflicts(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		release := make(chan struct{})
		rec := &recorder{fn: func(ctx context.Context, r sqlease.Run) error {
			if r.Attempt == 1 && r.Job == "busy" {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		}}
		s := newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: rec.handle})
		if _, _, err := s.Create(ctx, sqlease.Job{Name: "busy"}); err != nil {
			t.Fatal(err)
		}
		runClaim(t, s)
		dbtest.WaitFor(t, 10*time.Second, "the run to start", func() bool { return rec.count() == 1 })
		before, _ := st.Job(ctx, "busy")
		if _, err := s.Trigger(ctx, "busy"); !errors.Is(err, sqlease.ErrConflict) {
			t.Fatalf("trigger while running: want ErrConflict, got %v", err)
		}
		if after, _ := st.Job(ctx, "busy"); after.LastModifiedAt != before.LastModifiedAt || !after.NextRunAt.Equal(before.NextRunAt) {
			t.Fatalf("a refused trigger changed the job: %+v -> %+v", before, after)
		}
		close(release)
		dbtest.WaitFor(t, 10*time.Second, "the run to finish", func() bool {
			j, _ := st.Job(ctx, "busy")
			return j.LockedBy == "" && j.NextRunAt.IsZero()
		})
		if _, err := s.Trigger(ctx, "busy"); err != nil {
			t.Fatalf("trigger after the run: %v", err)
		}
		dbtest.WaitFor(t, 10*time.Second, "the triggered run", func() bool { return rec.count() == 2 })
		// A transient error says "try again", and is tried again: InnoDB
		// may pick the trigger's transaction as a deadlock's victim while
		// the run's finish commits (CI, MariaDB: Error 1213).
		_, err := s.Trigger(ctx, "missing")
		for try := 1; errors.Is(err, sqlease.ErrTransient) && try < 5; try++ {
			t.Logf("trigger of a missing job, try %d: %v", try, err)
			_, err = s.Trigger(ctx, "missing")
		}
		if !errors.Is(err, sqlease.ErrNoJob) {
			t.Fatalf("trigger of a missing job: want ErrNoJob, got %v", err)
		}
	})
}

// TestClaimStartsOnlyOneOffs: the claim starts one-off jobs itself, but a
// recurring job's occurrence is for the missed-runs policy to decide (here
// run_once must move past the missed occurrences), so it is left unstarted.
func TestClaimStartsOnlyOneOffs(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		if st.Dialect().Jobs.ClaimStart == "" {
			t.Skip("this dialect's claim starts no run (the batch start after it does)")
		}
		admin := newSched(t, scheduler.Config{Store: st, Holder: "admin"})
		past := time.Now().Add(-time.Hour)
		for _, j := range []sqlease.Job{
			{Name: "once"},
			{Name: "at", Schedule: sqlease.Schedule{At: past}},
			{Name: "every", Schedule: sqlease.Schedule{Every: time.Minute}},
			{Name: "cron", Schedule: sqlease.Schedule{Cron: "* * * * *", Timezone: "Europe/Berlin"}},
		} {
			if _, _, err := admin.Create(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
		// Make the recurring ones an hour overdue: several occurrences missed.
		if _, err := st.DB().ExecContext(ctx, `UPDATE sqlease_jobs SET next_run_at = $1 WHERE name IN ('every', 'cron')`, timeParam(st, past.Truncate(time.Minute))); err != nil {
			t.Fatal(err)
		}
		claimed, err := st.ClaimAndStart(ctx, "w", 10, sqlstore.ClaimCursor{})
		if err != nil || len(claimed) != 4 {
			t.Fatalf("claim: %v, %d jobs", err, len(claimed))
		}
		for _, c := range claimed {
			oneOff := c.Name == "once" || c.Name == "at"
			if (c.Started != nil) != oneOff {
				t.Errorf("%s: started by the claim = %v, want %v", c.Name, c.Started != nil, oneOff)
			}
		}
	})
}

// writtenObserver records, at each RunFinished, what the ledger says of the
// job's runs: the observer is told once the outcome write has returned.
type writtenObserver struct {
	st   *sqlstore.Store
	mu   sync.Mutex
	seen []string
}

func (o *writtenObserver) RunFinished(job string, outcome sqlease.Outcome, _ time.Duration) {
	runs, err := o.st.Runs(context.Background(), job, 1)
	got := "no run"
	if err != nil {
		got = err.Error()
	} else if len(runs) == 1 {
		got = string(runs[0].Outcome)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, fmt.Sprintf("%s: told %s, ledger %s", job, outcome, got))
}

func (o *writtenObserver) snapshot() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.seen...)
}

// TestObserverAfterWrite: in claim and leader mode alike (grouped finishes
// on PostgreSQL, one by one elsewhere), RunFinished comes after the run's
// outcome is in the ledger, so metrics never count an outcome a crash
// could still lose.
func TestObserverAfterWrite(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		for _, mode := range []string{"claim", "leader"} {
			t.Run(mode, func(t *testing.T) {
				st := newStore(t)
				obs := &writtenObserver{st: st}
				rec := &recorder{fn: func(ctx context.Context, r sqlease.Run) error {
					if r.Job == mode+"-fails" {
						return errors.New("boom")
					}
					return nil
				}}
				s := newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: rec.handle, Observer: obs})
				for _, name := range []string{mode + "-ok", mode + "-fails"} {
					if _, _, err := s.Create(ctx, sqlease.Job{Name: name, Retry: sqlease.Retry{MaxAttempts: 1}}); err != nil {
						t.Fatal(err)
					}
				}
				if mode == "claim" {
					runClaim(t, s)
				} else {
					lead(t, st, &s, "leader")
				}
				dbtest.WaitFor(t, 10*time.Second, "both runs observed", func() bool { return len(obs.snapshot()) == 2 })
				for _, line := range obs.snapshot() {
					if line != mode+"-ok: told succeeded, ledger succeeded" && line != mode+"-fails: told failed, ledger failed" {
						t.Errorf("observed before the write: %s", line)
					}
				}
			})
		}
	})
}

// TestLeaderLoadsNextWindowAtOnce: a backlog larger than MaxScheduled runs
// window after window without waiting for the next refresh between them.
func TestLeaderLoadsNextWindowAtOnce(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		rec := &recorder{}
		s := newSched(t, scheduler.Config{Store: st, Handler: rec.handle, MaxScheduled: 5, RefreshInterval: time.Minute})
		const n = 23
		for i := range n {
			if _, _, err := s.Create(ctx, sqlease.Job{Name: fmt.Sprintf("backlog-%02d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		e := lead(t, st, &s, "leader")
		dbtest.WaitFor(t, 10*time.Second, "leadership", e.IsLeader)
		dbtest.WaitFor(t, 10*time.Second, fmt.Sprintf("all %d runs (windows of 5, refresh every minute)", n), func() bool { return rec.count() == n })
	})
}

// TestLeaderClaimsNoFinishedJob: a leader working off a backlog window by
// window never claims a job whose run it has finished. A reload reads the
// next window while the last runs of the previous one finish; a one-off
// job whose finish committed after that read, and which the reload no
// longer counted as running, was scheduled again from the read and claimed
// for nothing, 5 times (2 % of a 100,000-job backlog on PostgreSQL), and
// the leader's count of such claims grew for as long as it led, costing
// every turn of its loop more.
func TestLeaderClaimsNoFinishedJob(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		var logs syncbuf.Buffer
		rec := &recorder{}
		s := newSched(t, scheduler.Config{Store: st, Handler: rec.handle, MaxScheduled: 50, RefreshInterval: time.Minute,
			Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		const n = 1000
		jobs := make([]sqlease.Job, n)
		for i := range jobs {
			jobs[i] = sqlease.Job{Name: fmt.Sprintf("backlog-%04d", i)}
		}
		if _, err := s.CreateMany(ctx, jobs); err != nil {
			t.Fatal(err)
		}
		var e *election.Elector
		e, err := election.New(election.Config{Store: st, HolderID: "leader",
			OnStartedLeading: func(ctx context.Context, tok sqlease.Token) {
				if err := s.Lead(ctx, e, tok); err != nil && ctx.Err() == nil {
					t.Errorf("Lead: %v", err)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = e.Run(runCtx) }()
		defer func() { cancel(); <-done }()
		dbtest.WaitFor(t, 60*time.Second, fmt.Sprintf("all %d runs (windows of 50)", n), func() bool { return rec.count() == n })
		cancel()
		<-done
		var missed []int
		for _, line := range strings.Split(logs.String(), "\n") {
			var ev struct {
				Msg    string `json:"msg"`
				Missed int    `json:"claims_missed"`
			}
			if json.Unmarshal([]byte(line), &ev) == nil && ev.Msg == "dispatch_ended" {
				missed = append(missed, ev.Missed)
			}
		}
		if len(missed) != 1 || missed[0] != 0 {
			t.Fatalf("claims that found nothing, per term: %v; want one term with none", missed)
		}
	})
}

// TestClaimCursorBound: under a backlog a worker claims from where its last
// claim ended (sqlstore.ClaimCursor), so a job that falls due behind that
// place — here one created for an hour before every job of the backlog,
// standing for a retry whose backoff ended or a stale claim — is not left
// until the backlog drains: a claim goes back to the start at least every
// PollInterval. Without that it would run last.
func TestClaimCursorBound(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		if !st.ClaimsFromCursor() {
			t.Skip("this dialect claims from the start every time")
		}
		admin := newSched(t, scheduler.Config{Store: st, Holder: "admin"})
		const backlog = 2000
		base := time.Now().Add(-time.Hour)
		jobs := make([]sqlease.Job, backlog)
		for i := range jobs {
			jobs[i] = sqlease.Job{Name: fmt.Sprintf("b-%04d", i), Schedule: sqlease.Schedule{At: base.Add(time.Duration(i) * time.Millisecond)}}
		}
		if _, err := admin.CreateMany(ctx, jobs); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		ran := 0    // backlog runs started
		oldAt := -1 // backlog runs started before the old job's
		var created, oldRan time.Time
		handle := func(ctx context.Context, r sqlease.Run) error {
			mu.Lock()
			if r.Job == "old" {
				oldAt, oldRan = ran, time.Now()
			} else {
				ran++
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond) // 8 at a time: about 400 runs/s, a backlog of seconds
			return nil
		}
		runClaim(t, newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: handle, BatchSize: 4, MaxConcurrent: 8,
			PollInterval: 200 * time.Millisecond}))
		dbtest.WaitFor(t, 30*time.Second, "the backlog to be under way", func() bool { mu.Lock(); defer mu.Unlock(); return ran >= 40 })
		created = time.Now()
		if _, _, err := admin.Create(ctx, sqlease.Job{Name: "old", Schedule: sqlease.Schedule{At: base.Add(-time.Hour)}}); err != nil {
			t.Fatal(err)
		}
		dbtest.WaitFor(t, 60*time.Second, "the old job to run", func() bool { mu.Lock(); defer mu.Unlock(); return oldAt >= 0 })
		mu.Lock()
		defer mu.Unlock()
		t.Logf("the old job ran %s after its creation, after %d of %d backlog runs", oldRan.Sub(created).Round(time.Millisecond), oldAt, backlog)
		if oldAt > backlog/2 {
			t.Errorf("the job behind the cursor ran after %d of the %d backlog runs: claims did not go back to the start every PollInterval", oldAt, backlog)
		}
	})
}
