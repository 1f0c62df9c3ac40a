package scheduler

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// fence runs a store write: directly in claim mode (the lock conditions are
// the fence), inside the leader's lease-fenced transaction in leader mode.
type fence func(ctx context.Context, fn func(tx *sql.Tx) error) error

func unfenced(ctx context.Context, fn func(*sql.Tx) error) error { return fn(nil) }

// gateKey carries the run's *runGate in its context.
type gateKey struct{}

// runGate is what a run's context carries for Ensure and ActDeadline: one
// value per run, built once.
type runGate struct {
	ensure func() error             // the lease gate's check, if any
	until  func() (time.Time, bool) // the lease term's acting deadline, if any
	trust  *lockTrust               // claim mode: the lock's trust, if any
	ctx    context.Context          // the run's: its cancellation cause
	// The run's checkpoint write (Checkpoint): its store, lock, run and
	// fence; sched is nil outside a run.
	sched  *Scheduler
	lock   sqlstore.Lock
	run    sqlease.Run
	fenced fence
}

func (g *runGate) check() error {
	if g.ensure != nil {
		if err := g.ensure(); err != nil {
			return err
		}
	}
	if g.trust != nil && !g.trust.ok() {
		return fmt.Errorf("%w: the run's lock may have gone stale (no heartbeat succeeded in time)", sqlease.ErrLeaseLost)
	}
	if err := context.Cause(g.ctx); err != nil {
		return fmt.Errorf("%w: %w", sqlease.ErrLeaseLost, err)
	}
	return nil
}

// actUntil is the earlier of the term's deadline and the lock's trust.
func (g *runGate) actUntil() (time.Time, bool) {
	if g.until == nil && g.trust == nil {
		return time.Time{}, false
	}
	var at time.Time
	if g.until != nil {
		u, open := g.until()
		if !open {
			return time.Time{}, true
		}
		at = u
	}
	if g.trust != nil {
		if u := g.trust.deadline(); at.IsZero() || u.Before(at) {
			at = u
		}
	}
	return at, true
}

// Ensure is the check a handler makes just before an irreversible external
// step: it returns nil while the run may still act, and an error wrapping
// sqlease.ErrNotLeader (leader mode: the lease is no longer trusted) or
// sqlease.ErrLeaseLost (claim mode: the job lock was lost) otherwise.
func Ensure(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", sqlease.ErrLeaseLost, context.Cause(ctx))
	}
	if g, ok := ctx.Value(gateKey{}).(*runGate); ok {
		return g.check()
	}
	return nil
}

// ActDeadline returns the local instant at which the run's right to act
// ends unless its lease or lock is renewed first (the gate's deadline, the
// lock's trust), and false when nothing bounds it. The instant moves on
// with every renewal: ask again. ctx is cancelled at that instant anyway;
// this is for what acts outside this process and must be stopped from
// outside should the process be frozen (the daemon's exec guard). An
// instant in the past means the run may no longer act.
func ActDeadline(ctx context.Context) (time.Time, bool) {
	if g, ok := ctx.Value(gateKey{}).(*runGate); ok {
		return g.actUntil()
	}
	return time.Time{}, false
}

// actUntil is a gate that tells until when its term may act
// (election.Elector).
type actUntil interface {
	ActUntil(tok sqlease.Token) (time.Time, bool)
}

// untilOf returns how long tok's term may act as a dispatch's until, or
// nil when the gate cannot tell.
func untilOf(gate any, tok sqlease.Token) func() (time.Time, bool) {
	g, ok := gate.(actUntil)
	if !ok {
		return nil
	}
	return func() (time.Time, bool) { return g.ActUntil(tok) }
}

// errLockLost is the cancellation cause of a run whose lock was lost.
var errLockLost = fmt.Errorf("run lock lost: %w", sqlease.ErrLeaseLost)

// dispatch is how a run is fenced and finished: by the lease in leader
// mode, by the job lock alone in claim mode.
type dispatch struct {
	// epoch is the run's fencing epoch: the lease epoch in leader mode, the
	// lock epoch in claim mode.
	epoch  int64
	fenced fence
	// ensure, if not nil, is the leader's gate check.
	ensure func() error
	// until, if not nil, is until when the term may act (false: unknown
	// term, over).
	until func() (time.Time, bool)
	// heartbeat extends the job lock while the run executes (claim mode).
	heartbeat bool
	// batch, if not nil, groups finish writes (Store.Batched). A run whose
	// finish it queues sets *queued and returns the zero time; the
	// finisher calls done after the write with the job's next occurrence
	// (zero when unknown), and the run's goroutine must not.
	batch  *finisher
	queued *bool
	done   func(next time.Time)
	// release, if not nil, frees the run's execution slot once its handler
	// has returned and its finish is queued (with batch).
	release func()
	// settled (leader mode) is when earlier terms' holders can no longer be
	// acting: an interrupted attempt they started is retried no earlier.
	settled time.Time
	// stored is the lease epoch this dispatch's claims store (see
	// sqlstore.OccurrenceQueries): minus a worker lease's epoch, a
	// leader's epoch, or 0. An overlap allow job's occurrence takes it.
	stored int64
	// spawned, if not nil, is told the job's next occurrence once an
	// overlap allow job's claim has spawned its occurrence and released
	// the job: that one may be claimed at once, while this one runs.
	spawned func(next time.Time)
}

// execute plans, starts, runs and finishes one claimed job. It returns the
// job's next_run_at as this run left it (zero: none, or unknown because a
// write failed), so that the leader can reschedule without a refresh.
func (s *Scheduler) execute(ctx context.Context, c *sqlstore.Claimed, d dispatch) (next time.Time) {
	log := s.runLogger(c)
	if !c.Lock.Occurrence.IsZero() {
		return s.executeOccurrence(ctx, c, d, log)
	}
	run, ok, planned, hasNext := Plan(c.Schedule, c.MissedRuns, c.SkipIfOlderThan, c.NextRunAt, c.Now)
	if interrupted(c) && !run.Equal(c.NextRunAt) {
		// An attempt of the due occurrence started and never finished (its
		// executor died or lost its lock): that occurrence was accepted and
		// is retried (SPEC G3), whatever the missed-runs policy says of the
		// occurrences after it — they follow the policy once it is done.
		run, ok = c.NextRunAt, true
	}
	if !hasNext {
		planned = time.Time{}
	}
	// c.Attempt counts the attempts started for c.NextRunAt.
	attempt := c.Attempt + 1
	if !run.Equal(c.NextRunAt) {
		attempt = 1 // the policy moved on to a later occurrence
	}
	if ok && attempt > c.Retry.MaxAttempts {
		// A predecessor died mid-run on the last allowed attempt.
		log.Warn("run_abandoned", slog.Time("scheduled_for", run), slog.Int("attempt", attempt-1), slog.String("reason", "max attempts reached after the executor stopped heartbeating"))
		planned, hasNext = nextAfter(c, run)
		ok = false
	}
	if !ok {
		if !hasNext {
			planned = time.Time{}
		}
		err := d.fenced(ctx, func(tx *sql.Tx) error { return s.store.ReleaseUnrun(ctx, tx, c.Lock, planned, 0) })
		if err != nil {
			log.Warn("run_skip_failed", slog.String("error", err.Error()))
			return time.Time{}
		}
		log.Info("run_skipped", slog.Time("due", c.NextRunAt), slog.Time("next_run_at", planned), slog.String("missed_runs", string(c.MissedRuns)))
		return planned
	}
	return s.startAndRun(ctx, c, run, attempt, d, log)
}

// startAndRun starts attempt `attempt` of c's occurrence at run, once an
// interrupted predecessor can no longer be acting, and runs it — unless the
// job's breaker skips it; an overlap allow job's claim first spawns the
// occurrence (spawn), which then runs under its own lock.
func (s *Scheduler) startAndRun(ctx context.Context, c *sqlstore.Claimed, run time.Time, attempt int, d dispatch, log *runLog) time.Time {
	if attempt > 1 {
		// The previous attempt may have been interrupted (also when this
		// claim took over no lock: see interrupted): its sender may be
		// alive (an advisory takeover does not wait for its lease to
		// expire). Retry once it can no longer be sending; the job stays
		// locked. (d.settled is in the past but right after a takeover.)
		if wait := time.Until(d.settled); wait > 0 {
			log.Info("run_retry_deferred", slog.Time("scheduled_for", run), slog.Int("attempt", attempt), slog.Duration("wait", wait),
				slog.String("reason", "the interrupted attempt's holder may still be acting until its lease expires"))
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return time.Time{}
			case <-s.drained:
				// Shutting down: nothing started; give the claim back so
				// that the next owner retries it (after its own wait).
				t.Stop()
				s.giveBackUnrun(ctx, c, d, log)
				return time.Time{}
			case <-t.C:
			}
		}
	}
	if c.Lock.Occurrence.IsZero() && breakerSkips(c) {
		return s.skipOpen(ctx, c, run, attempt, d, log)
	}
	if c.Schedule.Overlap == sqlease.OverlapAllow && c.Lock.Occurrence.IsZero() {
		oc, next, ok := s.spawn(ctx, c, run, d, log)
		if !ok {
			return next
		}
		c = oc
	}
	var r sqlease.Run
	err := d.fenced(ctx, func(tx *sql.Tx) error {
		var err error
		r, err = s.store.StartRun(ctx, tx, c.Lock, c.Name, run, attempt, d.epoch)
		return err
	})
	if err != nil {
		log.Warn("run_start_failed", slog.Time("scheduled_for", run), slog.Int("attempt", attempt), slog.String("error", err.Error()))
		if !errors.Is(err, sqlease.ErrLeaseLost) && !errors.Is(err, sqlease.ErrConflict) && !errors.Is(err, sqlease.ErrNotLeader) {
			// Nothing started: give the claim back, so the occurrence is
			// retried at once rather than after the lock times out.
			s.giveBackUnrun(ctx, c, d, log)
		}
		return time.Time{}
	}
	return s.runStarted(ctx, c, r, d, log)
}

// breakerSkips reports whether c's due occurrence is skipped by its
// breaker: open at the claim (database time), that is opened and its
// cool-down not over — once it is over the breaker is half open and the
// due occurrence runs as the probe — and not triggered. A trigger is an
// operator asking for a run now, so it runs as a probe whatever the
// cool-down (Temporal's "trigger immediately" likewise ignores the
// schedule's state): its success closes the breaker, its failure opens it
// again from now. A triggered occurrence is the one that moved a regular
// occurrence still to come aside (RegularNextAt, after it).
// giveBackUnrun gives claim c back as not run (its attempt count kept), so
// that its next owner retries it at once rather than after the lock times
// out; in a fenced transaction that outlives ctx by up to 10 s, since it
// often follows ctx's end.
func (s *Scheduler) giveBackUnrun(ctx context.Context, c *sqlstore.Claimed, d dispatch, log *runLog) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := d.fenced(rctx, func(tx *sql.Tx) error {
		return s.store.ReleaseUnrun(rctx, tx, c.Lock, c.NextRunAt, c.Attempt)
	}); err != nil {
		log.Warn("run_release_failed", slog.String("error", err.Error()))
	}
}

func breakerSkips(c *sqlstore.Claimed) bool {
	state, _ := c.BreakerState(c.Now)
	return state == sqlease.BreakerOpen && !c.RegularNextAt.After(c.NextRunAt)
}

// skipOpen records the due occurrence of a job whose breaker is open as
// skipped ("breaker open") and leaves the job at its next occurrence, in
// one fenced write: the occurrence is in the ledger once, like a run.
func (s *Scheduler) skipOpen(ctx context.Context, c *sqlstore.Claimed, run time.Time, attempt int, d dispatch, log *runLog) time.Time {
	next, _ := nextAfter(c, run)
	f := sqlstore.Finish{Outcome: sqlease.OutcomeSkipped, Error: sqlease.BreakerOpenError, Next: next}
	err := d.fenced(ctx, func(tx *sql.Tx) error {
		_, err := s.store.SkipRun(ctx, tx, c.Lock, c.Name, run, attempt, d.epoch, f)
		return err
	})
	if err != nil {
		log.Warn("run_skip_failed", slog.Time("scheduled_for", run), slog.String("error", err.Error()))
		return time.Time{}
	}
	s.cfg.Observer.RunFinished(c.Name, sqlease.OutcomeSkipped, 0)
	if o, ok := s.cfg.Observer.(BreakerObserver); ok {
		o.BreakerSkipped(c.Name)
	}
	log.Info("run_skipped", slog.Time("scheduled_for", run), slog.Time("next_run_at", next), slog.String("reason", sqlease.BreakerOpenError),
		slog.Time("breaker_opened_at", c.BreakerOpenedAt))
	return next
}

// errOverlapCancel is the cancellation cause of a run its next occurrence
// cancelled (sqlease.OverlapCancelRunning).
var errOverlapCancel = errors.New(sqlease.OverlapCancelledError)

// cancelAtNext cancels a cancel_running job's run when its next occurrence
// falls due, and returns the timer (nil when there is no next one). The
// due time is on the database clock: it becomes a local instant by the
// claim's database now and its send time, so a run is cancelled early by
// at most the claim's round trip, never late by a clock skew; a leader's
// claim without a send time counts from now, late by the time since the
// claim.
func (s *Scheduler) cancelAtNext(c *sqlstore.Claimed, run time.Time, cancel context.CancelCauseFunc) *time.Timer {
	due, ok := nextAfter(c, run)
	if !ok || due.IsZero() {
		return nil
	}
	from := c.SentAt
	if from.IsZero() {
		from = time.Now()
	}
	return time.AfterFunc(time.Until(from.Add(due.Sub(c.Now))), func() { cancel(errOverlapCancel) })
}

// overlapSkipped returns the occurrences of c from next on that fell due by
// now (database time) — the ones a skip job's run overlapped — and the
// first occurrence after now, the job's next. At most
// sqlstore.MaxSkippedPerFinish are listed; the rest are counted.
func overlapSkipped(c *sqlstore.Claimed, next, now time.Time) (sqlstore.Skipped, time.Time) {
	skip := sqlstore.Skipped{Reason: sqlease.OverlapSkippedError}
	for !next.IsZero() && !next.After(now) {
		if len(skip.At) < sqlstore.MaxSkippedPerFinish {
			skip.At = append(skip.At, next)
		} else {
			skip.More++
			skip.Last = next
		}
		n, ok := Next(c.Schedule, next)
		if !ok {
			n = time.Time{}
		}
		next = n
	}
	return skip, next
}

// nextAfter is the job's next occurrence once the occurrence at run is
// done: Next, unless a trigger moved a regular occurrence still to come
// aside (RegularNextAt, after run), which it resumes, so that a trigger
// never shifts an every job's phase.
func nextAfter(c *sqlstore.Claimed, run time.Time) (time.Time, bool) {
	next, ok := Next(c.Schedule, run)
	if ok && c.RegularNextAt.After(run) {
		return c.RegularNextAt, true
	}
	return next, ok
}

// breakerAfter is the change a finish f of c's run makes to c's breaker,
// and whether there is one to write: a failed occurrence (its last attempt
// failed) counts, and opens the breaker at Failures in a row or when it
// was the probe of a half-open breaker; a success closes it. Attempts to be
// retried, and runs cut short (abandoned), change nothing.
func breakerAfter(c *sqlstore.Claimed, f sqlstore.Finish) (sqlstore.BreakerUpdate, bool) {
	if c.Breaker.IsZero() {
		return sqlstore.BreakerUpdate{}, false
	}
	wasOpen := !c.BreakerOpenedAt.IsZero()
	switch f.Outcome {
	case sqlease.OutcomeSucceeded:
		if c.BreakerFailures == 0 && !wasOpen {
			return sqlstore.BreakerUpdate{}, false
		}
		return sqlstore.BreakerUpdate{Changed: wasOpen}, true
	case sqlease.OutcomeFailed, sqlease.OutcomeTimedOut:
		if f.Attempt != 0 {
			return sqlstore.BreakerUpdate{}, false // the occurrence is retried
		}
		n := c.BreakerFailures + 1
		open := wasOpen || n >= c.Breaker.Failures
		return sqlstore.BreakerUpdate{Failures: n, Open: open, Changed: open}, true
	}
	return sqlstore.BreakerUpdate{}, false
}

// interrupted reports whether an attempt of c's due occurrence started
// without completing it, so that the occurrence must be retried whatever
// later occurrences fell due meanwhile: attempts were counted and some are
// left, the occurrence is not older than skip_if_older_than, and the policy
// is not skip (a skip job runs only the occurrences from now on; an
// interrupted run is marked abandoned).
//
// It does not ask whether the claim took over a stale lock: the attempt
// may have been interrupted before the claim before this one, which gave
// the job back without starting anything (a start that failed, a deferred
// retry cut short by a shutdown), and which must not turn an accepted
// occurrence into a missed one (SPEC G3). So a job waiting to retry a
// failed attempt retries that occurrence too, on every dialect.
func interrupted(c *sqlstore.Claimed) bool {
	return c.Attempt > 0 && c.Attempt < c.Retry.MaxAttempts && c.MissedRuns != sqlease.Skip &&
		(c.SkipIfOlderThan <= 0 || !c.NextRunAt.Before(c.Now.Add(-c.SkipIfOlderThan)))
}

// fastStart reports whether a claimed job can be started by a batch start
// (Store.StartRuns), and with which request: its due occurrence runs as it
// is (the missed-runs policy does not move on), it has attempts left and it
// is not a stale lock taken over, whose crashed run execute marks abandoned.
func fastStart(c sqlstore.Claimed) (sqlstore.StartReq, bool) {
	if c.Reclaimed {
		return sqlstore.StartReq{}, false
	}
	return onTimeStart(c)
}

// onTimeStart reports whether a claimed job's due occurrence runs as it is
// (the missed-runs policy does not move on) with attempts left — the start
// execute would make, without its other cases — and with which request.
func onTimeStart(c sqlstore.Claimed) (sqlstore.StartReq, bool) {
	// An overlap allow job's run starts under its occurrence's lock, which
	// the batch start does not know.
	if c.Attempt+1 > c.Retry.MaxAttempts || breakerSkips(&c) || c.Schedule.Overlap == sqlease.OverlapAllow || !c.Lock.Occurrence.IsZero() {
		return sqlstore.StartReq{}, false
	}
	run, ok, _, _ := Plan(c.Schedule, c.MissedRuns, c.SkipIfOlderThan, c.NextRunAt, c.Now)
	if !ok || !run.Equal(c.NextRunAt) {
		return sqlstore.StartReq{}, false
	}
	return sqlstore.StartReq{Lock: c.Lock, Job: c.Name, ScheduledFor: run, Attempt: c.Attempt + 1}, true
}

// corruptRetry is how long a claimed job whose row cannot be decoded is
// set aside before it is claimed again: a row mended meanwhile (or one a
// newer version wrote, claimed by a node of that version) runs then.
const corruptRetry = time.Minute

// setAside releases, unrun, the claimed jobs whose rows cannot be decoded,
// each not due again for corruptRetry (sqlstore.Store.SetAside), in tx when
// it is not nil. An operator must see each: it is an error, logged with the
// job's name.
func (s *Scheduler) setAside(ctx context.Context, tx *sql.Tx, bad *sqlstore.CorruptClaims) error {
	for _, c := range bad.Rows {
		s.log.Error("job_row_corrupt", slog.String("job", c.Row.Name), slog.Int64("job_id", c.Lock.JobID),
			slog.String("error", c.Row.Err.Error()), slog.Duration("retry_in", corruptRetry))
		if err := s.store.SetAside(ctx, tx, c, corruptRetry); err != nil {
			return err
		}
		// Counted once set aside (in a leader's claim, before its
		// transaction commits: one that rolls back is counted again at the
		// next claim of the row).
		if o, ok := s.cfg.Observer.(CorruptObserver); ok {
			o.JobRowCorrupt(c.Row.Name)
		}
	}
	return nil
}

// runStarted runs a started run's handler and records its outcome.
func (s *Scheduler) runStarted(ctx context.Context, c *sqlstore.Claimed, r sqlease.Run, d dispatch, log *runLog) time.Time {
	run, attempt, ensure := r.ScheduledFor, r.Attempt, d.ensure
	r.Action = c.Action
	log.start(run, attempt, d.epoch)
	log.Info("run_started")

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var trust *lockTrust
	if d.heartbeat {
		// Claim mode: the run trusts its lock only until a margin before it
		// can go stale, from the last heartbeat that succeeded (at first,
		// from the claim's send time: a slow start, or a pause between
		// claim and start, is time the lock no longer has): then it is
		// cancelled and refused by Ensure, before another worker may
		// reclaim the job — also when waking from a pause, whatever the
		// heartbeats did.
		trust = newLockTrust(c.SentAt, c.LockTimeout, func() { cancel(errLockLost) })
		defer trust.stop()
		if !trust.ok() {
			cancel(errLockLost) // its deadline passed already
		}
	}
	runCtx = context.WithValue(runCtx, gateKey{}, &runGate{ensure: ensure, until: d.until, trust: trust, ctx: runCtx,
		sched: s, lock: c.Lock, run: r, fenced: d.fenced})
	var out *outputSlot
	if s.cfg.OutputLimit > 0 {
		out = &outputSlot{limit: s.cfg.OutputLimit}
		runCtx = context.WithValue(runCtx, outputKey{}, out)
	}
	var beat *runBeat
	if d.heartbeat {
		// The heartbeat loop, and the trust's timer, start only when the
		// first beat is due (beatGroups), so a short run costs no
		// goroutine and no timer for them.
		beat = &runBeat{ctx: runCtx, cancel: cancel, c: c, trust: trust, log: log}
		s.beats.join(s, beat, s.heartbeatEvery(c))
	}

	started := time.Now()
	if c.Schedule.Overlap == sqlease.OverlapCancelRunning {
		if t := s.cancelAtNext(c, run, cancel); t != nil {
			defer t.Stop()
		}
	}
	herr := s.resumeFrom(runCtx, &r)
	if herr == nil {
		herr = s.callHandler(runCtx, r)
	}
	cancel(nil)
	if beat != nil {
		s.beats.leave(beat) // its heartbeat started: waits for its last write
	}
	took := time.Since(started)

	f := sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}
	switch {
	case herr == nil:
		f.Next, _ = nextAfter(c, run)
	case ctx.Err() != nil || errors.Is(context.Cause(runCtx), errLockLost):
		// Cancelled from outside (shutdown, leadership or lock lost): the
		// occurrence is retried by the next owner with the same key.
		f = sqlstore.Finish{Outcome: sqlease.OutcomeAbandoned, Error: herr.Error(), Next: run, Attempt: attempt}
	case errors.Is(context.Cause(runCtx), errOverlapCancel):
		// Cancelled on purpose by the next occurrence (cancel_running):
		// done, not retried; the next occurrence is due now.
		f = sqlstore.Finish{Outcome: sqlease.OutcomeCancelled, Error: sqlease.OverlapCancelledError}
		f.Next, _ = nextAfter(c, run)
	default:
		f.Outcome, f.Error = sqlease.OutcomeFailed, herr.Error()
		if errors.Is(herr, sqlease.ErrTimedOut) {
			f.Outcome = sqlease.OutcomeTimedOut
		}
		if ShouldRetry(c.Retry, attempt) {
			f.Next, f.Attempt = run, attempt
			f.Backoff = Backoff(c.Retry, attempt, rand.Float64())
		} else {
			f.Next, _ = nextAfter(c, run)
		}
	}
	f.Output = out.get()
	// The outcome is written even after cancellation, fenced by the lock
	// (and lease): a run that lost its lock writes nothing, nor its output.
	next := f.Next
	if f.Backoff > 0 {
		// The retry waits for not_before = the database's now at the finish
		// + backoff; estimate it on the database clock from the claim, a
		// little late rather than early (the leader's own writes send no
		// change notification).
		next = c.Now.Add(time.Since(started) + f.Backoff + 50*time.Millisecond)
	}
	var skip sqlstore.Skipped
	if c.Schedule.Overlap == sqlease.OverlapSkip && f.Attempt == 0 && !f.Next.IsZero() {
		// What fell due while this run ran is skipped, not run late: on
		// the database clock from the claim, early rather than late (time
		// since the handler started, not since the claim was sent), so
		// that no occurrence still to come is skipped.
		skip, f.Next = overlapSkipped(c, f.Next, c.Now.Add(time.Since(started)))
		next = f.Next
	}
	bu, breaker := breakerAfter(c, f)
	if d.batch != nil && !breaker && len(skip.At) == 0 && c.Lock.Occurrence.IsZero() {
		// The finisher writes and logs the outcome, then calls d.done.
		*d.queued = true
		// by: when the job's next occurrence falls due, from the database
		// clock as of the claim (passed already for a job behind).
		var by time.Time
		if !next.IsZero() {
			now := time.Now()
			by = now.Add(next.Sub(c.Now.Add(now.Sub(started))))
		}
		d.batch.finish(finishItem{req: sqlstore.FinishReq{Lock: c.Lock, Run: r, Finish: f}, took: took, log: log, next: next, by: by, done: d.done}, d.release)
		return time.Time{}
	}
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	fr := r // the copy the closure takes, so that the batched path allocates none
	err := retryTransient(wctx, func() error {
		return d.fenced(wctx, func(tx *sql.Tx) error {
			if len(skip.At) > 0 {
				var b *sqlstore.BreakerUpdate
				if breaker {
					b = &bu
				}
				return s.store.FinishRunSkipping(wctx, tx, c.Lock, fr, f, skip, b)
			}
			if breaker {
				// The breaker's state changes with the finish, in its
				// transaction and under its lock (and lease).
				return s.store.FinishRunBreaker(wctx, tx, c.Lock, fr, f, bu)
			}
			return s.store.FinishRun(wctx, tx, c.Lock, fr, f)
		})
	})
	wcancel()
	s.cfg.Observer.RunFinished(c.Name, f.Outcome, took)
	logFinish(log, f, took, err)
	if n := len(skip.At) + skip.More; n > 0 && err == nil {
		for range n {
			s.cfg.Observer.RunFinished(c.Name, sqlease.OutcomeSkipped, 0)
		}
		log.Info("run_overlap_skipped", slog.Int("occurrences", n), slog.Time("first", skip.At[0]), slog.Time("next_run_at", f.Next))
	}
	if breaker && err == nil && bu.Changed {
		state := sqlease.BreakerClosed
		if bu.Open {
			state = sqlease.BreakerOpen
		}
		log.Info("job_breaker_changed", slog.String("state", state), slog.Int("consecutive_failures", bu.Failures))
	}
	if err != nil {
		return time.Time{}
	}
	return next
}

// logFinish logs a run's outcome, or the failure to write it.
func logFinish(log *runLog, f sqlstore.Finish, took time.Duration, err error) {
	switch {
	case err != nil:
		log.Warn("run_finish_failed", slog.String("outcome", string(f.Outcome)), slog.String("error", err.Error()))
	case f.Error != "":
		log.Info("run_finished", slog.String("outcome", string(f.Outcome)), slog.Duration("took", took), slog.String("error", f.Error))
	default:
		log.Info("run_finished", slog.String("outcome", string(f.Outcome)), slog.Duration("took", took))
	}
}

// retryTransient runs a finish write, retrying a transient failure a few
// times: giving up would leave the lock to time out and the finished
// occurrence to run again.
func retryTransient(ctx context.Context, write func() error) error {
	for try, wait := 0, 50*time.Millisecond; ; try, wait = try+1, wait*2 {
		err := write()
		if err == nil || try == 4 || !errors.Is(err, sqlease.ErrTransient) || ctx.Err() != nil {
			return err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return err
		}
	}
}

// callHandler runs the handler, turning a panic into an error so that one
// bad job cannot take the scheduler down.
func (s *Scheduler) callHandler(ctx context.Context, r sqlease.Run) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	if s.cfg.Handler == nil {
		return errors.New("no handler configured")
	}
	return s.cfg.Handler(ctx, r)
}

// heartbeatEvery is the heartbeat interval of a run of c.
// A configured interval is capped so that two beats fit before the run's
// local deadline (lockTrust).
func (s *Scheduler) heartbeatEvery(c *sqlstore.Claimed) time.Duration {
	if s.cfg.HeartbeatInterval != 0 {
		return min(s.cfg.HeartbeatInterval, (c.LockTimeout-lockMargin(c.LockTimeout))/2)
	}
	return c.LockTimeout / 4
}

// lockMargin is how long before its lock can go stale a claim-mode run stops
// trusting it: a quarter of lock_timeout covers the latency of the beat that
// refreshed it and the clock-rate drift of the host.
func lockMargin(lockTimeout time.Duration) time.Duration { return lockTimeout / 4 }

// lockTrust is a claim-mode run's local deadline: the send time of its last
// successful heartbeat (at first, of its claim) + lock_timeout - margin, on
// the monotonic clock. onExpiry runs when it passes without a renewal,
// once its timer is armed (arm) — which the run's first heartbeat does, due
// before the deadline: until then a check of the deadline is the clock's
// (ok), and a run that ends first arms no timer.
type lockTrust struct {
	ttl      time.Duration // lock_timeout - margin
	onExpiry func()
	mu       sync.Mutex
	until    time.Time
	timer    *time.Timer // nil until armed
}

// newLockTrust starts the deadline of a lock taken by a statement sent at
// from (zero: now).
func newLockTrust(from time.Time, lockTimeout time.Duration, onExpiry func()) *lockTrust {
	if from.IsZero() {
		from = time.Now()
	}
	t := &lockTrust{ttl: lockTimeout - lockMargin(lockTimeout), onExpiry: onExpiry}
	t.until = from.Add(t.ttl)
	return t
}

// arm starts the timer that runs onExpiry at the deadline: at once when it
// has passed already.
func (t *lockTrust) arm() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer == nil {
		t.timer = time.AfterFunc(time.Until(t.until), t.onExpiry)
	}
}

// renewed moves the deadline on after a heartbeat sent at sentAt succeeded.
func (t *lockTrust) renewed(sentAt time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if u := sentAt.Add(t.ttl); u.After(t.until) {
		t.until = u
		if t.timer != nil && t.timer.Stop() {
			t.timer.Reset(time.Until(u))
		}
	}
}

// deadline is the instant the lock stops being trusted.
func (t *lockTrust) deadline() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.until
}

// left is the time to the deadline.
func (t *lockTrust) left() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return time.Until(t.until)
}

func (t *lockTrust) ok() bool { return t.left() > 0 }

func (t *lockTrust) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer != nil {
		t.timer.Stop()
	}
}

// beatGroups holds the first heartbeat of the claim-mode runs in flight,
// one timer for the runs whose locks one claim took. Those share the
// claim's send time and lock_timeout, so their local deadline (lockTrust)
// and the instant their first beat is due: one timer stands for every
// run's first beat, and a run that ends before it — most do: a webhook
// answers in milliseconds, the first beat is due at a quarter of
// lock_timeout — arms no timer of its own and starts no goroutine. (A
// heartbeat timer and a trust timer armed and stopped per run were each
// about a microsecond of a daemon's CPU per delivery, with the runtime's
// timer-heap upkeep.) When the group's timer fires, each run still running
// arms its trust timer (which fires at once if the deadline passed, as
// after a pause of the process) and starts its heartbeat loop, exactly as
// the run's own timer did; the group is then gone, and a run that starts
// later under the same lock time begins a new one. A group outlives its
// runs until then (leave).
type beatGroups struct {
	mu sync.Mutex
	m  map[beatKey]*beatGroup
	// last is the group made last, which stays while empty (leave).
	last *beatGroup
}

// beatKey is what fixes a run's first beat: its deadline and its
// heartbeat interval.
type beatKey struct {
	until time.Time
	every time.Duration
}

type beatGroup struct {
	key   beatKey
	timer *time.Timer
	runs  map[*runBeat]struct{}
}

// runBeat is one run's part in its group: what its heartbeat loop needs.
type runBeat struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	c      *sqlstore.Claimed
	trust  *lockTrust
	log    *runLog
	group  *beatGroup
	// done is made, under beatGroups.mu, when the group fires; the
	// heartbeat loop closes it when it ends.
	done chan struct{}
}

// join adds r to its group, making one whose first beat is due after
// min(every, half the time left to the deadline) — sooner when a slow start
// left the lock less than two intervals. A run that joins an existing group
// beats no later than that from its own start: the group's instant was
// taken by an earlier start, with as much time left or more.
func (b *beatGroups) join(s *Scheduler, r *runBeat, every time.Duration) {
	key := beatKey{until: r.trust.deadline(), every: every}
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.m[key]
	if g == nil {
		if b.m == nil {
			b.m = make(map[beatKey]*beatGroup)
		}
		if p := b.last; p != nil {
			b.dropEmpty(p)
		}
		g = &beatGroup{key: key, runs: make(map[*runBeat]struct{})}
		b.m[key] = g
		b.last = g
		g.timer = time.AfterFunc(min(every, r.trust.left()/2), func() { b.fire(s, g) })
	}
	g.runs[r] = struct{}{}
	r.group = g
}

// fire starts the heartbeat of every run still in g.
func (b *beatGroups) fire(s *Scheduler, g *beatGroup) {
	b.mu.Lock()
	if b.m[g.key] == g {
		delete(b.m, g.key)
	}
	if b.last == g {
		b.last = nil
	}
	runs := make([]*runBeat, 0, len(g.runs))
	for r := range g.runs {
		r.done = make(chan struct{})
		runs = append(runs, r)
	}
	g.runs = nil
	b.mu.Unlock()
	for _, r := range runs {
		r.trust.arm()
		go s.heartbeat(r.ctx, r.cancel, r.c, r.trust, r.log, r.done)
	}
}

// leave takes r, whose context has ended, out of its group; when the group
// fired already, it waits for r's heartbeat loop to end (its last write).
// An emptied group goes, its timer stopped, unless it is the last one made:
// that one stays until its timer fires (at most one interval) or another
// group is made, so that the latest claim's runs that start after others
// ended join it — removed with its last run, a claim of short runs started
// one after another made a group and a timer per run — while at most one
// empty group waits, however many small claims a trickle makes.
func (b *beatGroups) leave(r *runBeat) {
	b.mu.Lock()
	if r.done != nil {
		b.mu.Unlock()
		<-r.done
		return
	}
	g := r.group
	delete(g.runs, r)
	if g != b.last {
		b.dropEmpty(g)
	}
	b.mu.Unlock()
}

// dropEmpty removes g, its timer stopped, when no run is in it; under mu.
func (b *beatGroups) dropEmpty(g *beatGroup) {
	if len(g.runs) > 0 {
		return
	}
	g.timer.Stop() // should it be firing, it finds no run
	if b.m[g.key] == g {
		delete(b.m, g.key)
	}
}

// heartbeat extends the run's lock until ctx ends. Each beat may take at
// most the time left before the run's local deadline; the run is cancelled
// at once when the lock is lost, after HeartbeatFailures consecutive
// failures, and — by trust's timer — when the deadline passes, so a run
// whose database hangs stops well before another worker may reclaim it.
func (s *Scheduler) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, c *sqlstore.Claimed, trust *lockTrust, log *runLog, done chan<- struct{}) {
	defer close(done)
	every := s.heartbeatEvery(c)
	t := time.NewTicker(every)
	defer t.Stop()
	failures := 0
	for first := true; ; first = false {
		if !first { // the first beat is due when the loop starts
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			return
		}
		left := trust.left()
		if left <= 0 {
			cancel(errLockLost)
			return
		}
		sentAt := time.Now()
		hctx, hcancel := context.WithTimeout(ctx, min(every, left))
		err := s.store.Heartbeat(hctx, c.Lock)
		hcancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil:
			failures = 0
			trust.renewed(sentAt)
			continue
		case errors.Is(err, sqlease.ErrLeaseLost):
			failures = s.cfg.HeartbeatFailures
		default:
			failures++
		}
		log.Warn("run_heartbeat_failed", slog.Int("consecutive_failures", failures), slog.String("error", err.Error()))
		if failures >= s.cfg.HeartbeatFailures {
			cancel(errLockLost)
			return
		}
	}
}
