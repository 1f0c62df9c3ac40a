package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// Run is claim-mode dispatch: until ctx ends, it claims due jobs for
// Config.Holder every PollInterval (at once again when a claim filled a
// whole batch, and between polls when it knows a job falls due: see
// ontime.go), executes them with heartbeats, and on shutdown gives
// in-flight runs ShutdownTimeout before cancelling them. It returns nil after
// ctx ends and every run has finished.
func (s *Scheduler) Run(ctx context.Context) error {
	return s.run(ctx, nil)
}

// WorkerGate is the check a worker lease's holder makes before acting: nil
// while it may act under tok (*election.Elector implements it).
type WorkerGate interface {
	Ensure(tok sqlease.Token) error
}

// workerTerm is a term of a claim-mode worker's own lease.
type workerTerm struct {
	tok  sqlease.Token
	gate WorkerGate

	// recheck: a claim failed after it may have committed (a transient
	// error: its answer lost with its connection, as when the database
	// ends the session): the jobs it locked for this term would wait for
	// lock_timeout, since the term lives on. Before the next claim the
	// worker gives back those of its locks that no run of its own holds
	// (giveBackLost).
	recheck bool

	mu   sync.Mutex
	runs map[int64]int // job id → this term's runs holding its lock, until their finish is written
}

// hold counts a run of this term on job id in (d 1) or out (d -1).
func (w *workerTerm) hold(id int64, d int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.runs == nil {
		w.runs = map[int64]int{}
	}
	if w.runs[id] += d; w.runs[id] <= 0 {
		delete(w.runs, id)
	}
}

func (w *workerTerm) holds(id int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.runs[id] > 0
}

// testLoseClaimAnswer, set by tests, makes a claim that committed report
// a lost connection instead of its jobs.
var testLoseClaimAnswer func(claimed int) bool

// giveBackLost gives back the jobs locked under w's term that no run of
// this worker holds: a claim whose answer was lost locked them, and nothing
// acts on them. Each goes back as a claim given back without starting
// (its started attempt, if the claim started one, is marked abandoned).
func (s *Scheduler) giveBackLost(ctx context.Context, w *workerTerm) error {
	own, ok, err := s.store.OwnClaims(ctx, w.tok)
	if err != nil || !ok {
		return err
	}
	for _, o := range own {
		if w.holds(o.Lock.JobID) {
			continue
		}
		err := s.store.ReleaseUnrun(ctx, nil, o.Lock, o.NextRunAt, o.Attempt)
		if errors.Is(err, sqlease.ErrLeaseLost) {
			continue // taken or finished meanwhile
		}
		if err != nil {
			return err
		}
		s.log.Warn("claim_given_back", slog.Int64("job_id", o.Lock.JobID), slog.Int64("lock_epoch", o.Lock.Epoch),
			slog.Int64("worker_epoch", w.tok.Epoch), slog.String("reason", "locked by a claim of this worker whose answer was lost; no run holds it"))
	}
	return nil
}

// Work is claim-mode dispatch for one term of this worker's own lease tok
// (sqlstore.WorkerLeasePrefix + Config.Holder, held by an Elector whose
// OnStartedLeading calls Work): as Run, but its claims are tied to the
// lease — reclaimable by other workers as soon as it has expired in
// database time, instead of after each job's lock_timeout — and its runs
// act only while gate trusts the lease: they are cancelled when ctx (the
// term) ends, and every just-in-time check (Ensure) asks gate. This is the
// leader's fencing argument applied to each worker: a worker whose lease
// another could reclaim has stopped trusting it by its local deadline,
// which comes before the expiry in database time. For a graceful stop call
// Drain while the lease is still held, then end the term.
func (s *Scheduler) Work(ctx context.Context, tok sqlease.Token, gate WorkerGate) error {
	if gate == nil {
		return fmt.Errorf("%w: scheduler: Work needs the worker lease's gate", sqlease.ErrInvalidConfig)
	}
	if tok.Holder != s.cfg.Holder || tok.Name != sqlstore.WorkerLeasePrefix+s.cfg.Holder {
		return fmt.Errorf("%w: scheduler: Work under %s@%d, want the worker lease %s%s", sqlease.ErrInvalidConfig, tok.Name, tok.Epoch, sqlstore.WorkerLeasePrefix, s.cfg.Holder)
	}
	return s.run(ctx, &workerTerm{tok: tok, gate: gate})
}

func (s *Scheduler) run(ctx context.Context, w *workerTerm) error {
	if err := sqlease.ValidateHolderID(s.cfg.Holder); err != nil {
		return err
	}
	// Runs outlive Run's context for ShutdownTimeout; under a worker lease
	// they end with the term, which ends when the lease is no longer
	// trusted.
	parent := context.WithoutCancel(ctx)
	if w != nil {
		parent = ctx
	}
	runCtx, cancel := context.WithCancel(parent)
	defer cancel()
	var fin *finisher
	if s.store.Batched() {
		// One writer: finishes that arrive while it writes form the next
		// group, and groups are largest with one statement in flight. At
		// a trickle a small group waits a little for more (finishLinger),
		// as the leader's does: one statement per run or two otherwise.
		fin = startFinisherDirect(s.store, s.cfg.MaxConcurrent, unfenced, nil, finishLinger, s.cfg.Observer)
		defer fin.stop() // after drain: every run has finished by then
	}
	workers := newRunWorkers()
	defer workers.close() // after drain: every run has finished by then
	var wg sync.WaitGroup
	defer s.drain(ctx, cancel, &wg, w != nil)
	wg.Add(1)
	go func() { defer wg.Done(); s.prune(ctx) }()

	timer := time.NewTimer(0)
	defer timer.Stop()
	// The worker claims when it knows a job falls due, not only every
	// PollInterval (ontime.go): at the instants its own finishes wrote
	// (hints), at the earliest one still to come (nextDue), and at once
	// after a change (Config.Changes, this Scheduler's own writes). Idle,
	// it claims once per PollInterval and asks nothing more.
	//
	// nextDue is asked right after a claim (so that the claim, and the
	// runs it starts, wait for no other statement): at start, after a
	// change, after a claim at the instant it named, and after a claim
	// that found jobs no hint told of (a poll that found work). NextDue
	// reports what is still to come at its own now, later than the
	// claim's: a job falling due in between was seen by neither. So when
	// the next instant is further away than that gap is wide (or there is
	// none), the worker claims once more at once, without asking again
	// unless that claim finds work: the job otherwise waited for the next
	// poll (the bench's last on-time job, 1.0 s late).
	//
	// Where the claim itself tells when the next job falls due
	// (sqlstore.ClaimNext, from a read no later than the claim: no such
	// gap), that answer stands for NextDue's, an idle poll's included.
	hints := newDueHints()
	var nextDue, wake time.Time // local clock; zero: unknown
	var from claimFrom
	canLearn := s.store.Dialect().Jobs.NextDue != ""
	learn := func() {
		d, ok, err := s.store.NextDue(ctx)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				s.log.Warn("next_due_failed", slog.String("error", err.Error()))
			}
			nextDue = time.Time{}
		case ok:
			nextDue = time.Now().Add(d)
		default:
			nextDue = time.Time{}
		}
	}
	learnNext := true
	full := false // the last claim filled its batch: the next one need not peek
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-s.cfg.Changes:
			learnNext = true
		case <-s.localWrites:
			learnNext = true
		case <-hints.poke:
			if t, ok := hints.first(); ok && t.Before(wake) {
				wake = t
				timer.Reset(max(time.Until(t), 0))
			}
			continue
		}
		sent := time.Now()
		atDue := !nextDue.IsZero() && !sent.Before(nextDue)
		hinted := hints.take(sent)
		from.occNow = hinted
		claimed, asked, next := s.claimOnce(ctx, runCtx, &wg, fin, workers, w, &from, hints, !full)
		full = asked > 0 && claimed == asked
		wait := s.cfg.PollInterval
		switch {
		case full || from.again:
			// As many were due as there was room for (more may be), or
			// a claim from the cursor ran short (jobs behind it may be due).
			wait = 0
		case next.Known:
			// The claim told when the next job falls due (ClaimPeek, an
			// idle poll's included, or a claim ahead's answer past its
			// window: no statement more): sleep until then,
			// as after NextDue. Its now was no later than the claim's,
			// so no job fell due unseen in between. A job created later
			// with an earlier time is found at the next poll at worst.
			learnNext = false
			nextDue = next.At
			if !nextDue.IsZero() {
				wait = min(wait, max(time.Until(nextDue), 0))
			}
		case canLearn && (learnNext || atDue || claimed > 0 && !hinted):
			learnNext = false
			learn()
			if gap := time.Since(sent); nextDue.IsZero() || time.Until(nextDue) > gap {
				wait = 0 // the claim after NextDue's now: see above
			} else {
				wait = min(wait, max(time.Until(nextDue), 0))
			}
		case !nextDue.IsZero():
			wait = min(wait, max(time.Until(nextDue), 0))
		}
		if t, ok := hints.first(); ok {
			wait = min(wait, max(time.Until(t), 0))
		}
		wake = time.Now().Add(wait)
		timer.Reset(wait)
	}
}

// claimOnce claims as many due jobs as there are free execution slots (at
// most BatchSize) and starts them; it returns how many it claimed, how
// many it asked for, and when the next job falls due where the claim
// learnt it (peek: see Store.ClaimAndStartNext). With a finisher
// (Store.Batched) the jobs whose due occurrence simply runs are started by
// one statement; the rest, and any that statement did not start, take the
// per-job path.
func (s *Scheduler) claimOnce(ctx, runCtx context.Context, wg *sync.WaitGroup, fin *finisher, workers *runWorkers, w *workerTerm, from *claimFrom, hints *dueHints, peek bool) (int, int, sqlstore.ClaimNext) {
	from.again = false // until a claim says otherwise
	if !s.begin() {
		return 0, 0, sqlstore.ClaimNext{}
	}
	defer s.inflight.Done()
	if w != nil && w.recheck {
		if err := s.giveBackLost(ctx, w); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("claim_give_back_failed", slog.String("error", err.Error()))
			}
			return 0, 0, sqlstore.ClaimNext{}
		}
		w.recheck = false
	}
	// Take the slots first so a claimed job never waits for one.
	slots := 0
	for slots < s.cfg.BatchSize {
		if slots == 0 {
			select {
			case s.sem <- struct{}{}:
				slots++
				continue
			case <-ctx.Done():
				return 0, 0, sqlstore.ClaimNext{}
			}
		}
		select {
		case s.sem <- struct{}{}:
			slots++
			continue
		default:
		}
		break
	}
	var claimed []sqlstore.Claimed
	var next sqlstore.ClaimNext
	var err error
	var ensure func() error
	var until func() (time.Time, bool)
	sent := time.Now() // the cursor's interval is counted from the claims' sending
	switch {
	case w != nil:
		// Claim only while the lease is trusted: a claim tied to a lease
		// that has expired would be another worker's already.
		if err = w.gate.Ensure(w.tok); err == nil {
			if fin != nil {
				claimed, next, err = s.claimAndStart(ctx, w, slots, from, peek)
			} else {
				claimed, err = s.store.ClaimDueUnder(ctx, w.tok, slots)
			}
			if err == nil && testLoseClaimAnswer != nil && testLoseClaimAnswer(len(claimed)) {
				claimed, err = nil, fmt.Errorf("%w: injected: the connection was lost after the claim committed", sqlease.ErrTransient)
			}
			// A connection lost or refused may have lost a commit's
			// answer. Not other errors.
			w.recheck = w.recheck || errors.Is(err, sqlease.ErrTransient) && ctx.Err() == nil
		}
		ensure = func() error { return w.gate.Ensure(w.tok) }
		until = untilOf(w.gate, w.tok)
	case fin != nil:
		claimed, next, err = s.claimAndStart(ctx, nil, slots, from, peek)
	default:
		claimed, err = s.store.ClaimDue(ctx, s.cfg.Holder, slots)
	}
	var bad *sqlstore.CorruptClaims
	if errors.As(err, &bad) {
		// The claim's other jobs run; the rows it cannot decode are set
		// aside (or, failing that, wait for their lock_timeout).
		if aerr := s.setAside(ctx, nil, bad); aerr != nil {
			s.log.Warn("set_aside_failed", slog.String("error", aerr.Error()))
		}
		err = nil
	}
	var stored int64 // what this worker's claims store as their lease epoch
	if w != nil {
		stored = -w.tok.Epoch
	}
	jobClaims := len(claimed)
	if err == nil && len(claimed) < slots {
		claimed = append(claimed, s.claimOccurrencesDue(ctx, w, from, stored, slots-len(claimed))...)
	}
	got := time.Now() // when the claim's answer, and its database now, arrived
	for i := len(claimed); i < slots; i++ {
		<-s.sem
	}
	if fin != nil && s.store.ClaimsFromCursor() {
		// Only where the claim honours the cursor: elsewhere a short
		// claim says nothing is due, and claiming again at once is waste.
		from.update(claimed[:jobClaims], slots, err, sent, s.cfg.PollInterval)
	}
	if err != nil {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, sqlease.ErrNotLeader) {
			s.log.Warn("claim_failed", slog.String("error", err.Error()))
		}
		return 0, slots, sqlstore.ClaimNext{}
	}
	started := s.startBatch(runCtx, claimed, fin != nil)
	for i := range claimed {
		c := &claimed[i]
		// A job claimed ahead (claimAndStart) starts at its due time: the
		// database's now has passed its occurrence by then, as the
		// answer arrived after the claim's now.
		var startAt time.Time
		if !c.Now.IsZero() && c.NextRunAt.After(c.Now) {
			startAt = got.Add(c.NextRunAt.Sub(c.Now))
		}
		wg.Add(1)
		s.inflight.Add(1)
		if w != nil {
			w.hold(c.ID, 1)
		}
		workers.run(func() {
			at := got // the local instant of c.Now
			var once sync.Once
			release := func() { once.Do(func() { <-s.sem }) }
			done := func(next time.Time) {
				if w != nil {
					w.hold(c.ID, -1) // its finish is written (or given up)
				}
				// The job's next occurrence, as this run's finish wrote
				// it: claim it when it falls due (at once for a job that
				// fell behind), not at the next poll.
				if t, ok := localDue(next, c.Now, at); ok && ctx.Err() == nil {
					hints.add(t)
				}
				s.inflight.Done()
				wg.Done()
			}
			queued := false
			var next time.Time
			defer func() {
				release()
				if !queued {
					done(next)
				}
			}()
			d := dispatch{epoch: c.Lock.Epoch, fenced: unfenced, ensure: ensure, until: until, heartbeat: true, batch: fin, queued: &queued, done: done, release: release,
				stored: stored, spawned: func(next time.Time) {
					if t, ok := localDue(next, c.Now, at); ok && ctx.Err() == nil {
						hints.add(t)
					}
				}}
			if !startAt.IsZero() {
				if !s.awaitClaimedStart(runCtx, w, startAt) {
					// Not started: its claim (and the run it recorded) is
					// left to be reclaimed, as any claim whose holder
					// stopped (orphan once the term's lease has expired,
					// else stale after lock_timeout).
					return
				}
				// The database's clock has reached at least this: what
				// execute and the finish reckon from, as from a claim's now.
				c.Now, at = c.NextRunAt.Add(time.Since(startAt)), time.Now()
			}
			if r := started[i]; r != nil {
				next = s.runStarted(runCtx, c, *r, d, s.runLogger(c))
				return
			}
			next = s.execute(runCtx, c, d)
		})
	}
	return len(claimed), slots, next
}

// claimFrom is where a worker's next claim starts (sqlstore.ClaimCursor):
// past its previous claims while they come back full, so that under a
// backlog a claim does not read again the jobs the worker has in flight;
// at the start after a claim that came back short or failed; and at the
// start at least every interval, so that a job behind the cursor (a retry
// whose backoff ended, a stale or orphaned claim, a job created or
// triggered with an earlier time) waits at most interval longer than it
// would without it.
type claimFrom struct {
	after sqlstore.ClaimCursor
	since time.Time // when the last claim from the start was sent
	// again: the last claim, from the cursor, ran short; claim again from
	// the start at once, not at the next poll.
	again bool
	// occAt is when occurrences of overlap allow jobs were last claimed
	// (ClaimOccurrences): every occurrenceScanPolls polls, and at once
	// when occNow (a hint fell due: a retry's backoff may be over).
	occAt  time.Time
	occNow bool
	// occAgain: a hinted read found nothing, and the next poll reads
	// again (see claimOccurrencesDue).
	occAgain bool
}

// update moves the cursor after a claim sent at sent that asked for asked
// jobs.
func (f *claimFrom) update(claimed []sqlstore.Claimed, asked int, err error, sent time.Time, interval time.Duration) {
	fromStart := f.after.IsZero()
	f.again = err == nil && !fromStart && len(claimed) < asked
	if err != nil || len(claimed) < asked || !fromStart && sent.Sub(f.since) >= interval {
		f.after = sqlstore.ClaimCursor{}
		return
	}
	if fromStart {
		f.since = sent
	}
	f.after = f.after.Past(claimed)
}

// startBatch starts, with one statement, the claimed jobs fastStart allows
// when batch is set (the claim itself started most one-off jobs);
// started[i] is claimed[i]'s run, or nil for the jobs left to execute's
// per-job start.
func (s *Scheduler) startBatch(ctx context.Context, claimed []sqlstore.Claimed, batch bool) []*sqlease.Run {
	started := make([]*sqlease.Run, len(claimed))
	if !batch {
		return started
	}
	var reqs []sqlstore.StartReq
	var at []int
	for i, c := range claimed {
		if c.Started != nil {
			started[i] = c.Started
			continue
		}
		if c.NextRunAt.After(c.Now) {
			continue // claimed ahead: execute starts it at its due time
		}
		if req, ok := fastStart(c); ok {
			reqs = append(reqs, req)
			at = append(at, i)
		}
	}
	if len(reqs) == 0 {
		return started
	}
	ok, err := s.store.StartRuns(ctx, nil, reqs)
	if err != nil {
		// execute retries each start alone and reports why it fails.
		s.log.Warn("run_batch_start_failed", slog.Int("runs", len(reqs)), slog.String("error", err.Error()))
		return started
	}
	for k, i := range at {
		if ok[k] {
			q := reqs[k]
			started[i] = &sqlease.Run{JobID: q.Lock.JobID, Job: q.Job, ScheduledFor: q.ScheduledFor, Attempt: q.Attempt,
				Holder: q.Lock.Holder, Epoch: q.Lock.Epoch, Outcome: sqlease.OutcomeRunning}
		}
	}
	return started
}

// drain waits for in-flight runs once ctx has ended. Under Run, ctx's end
// is a shutdown: the runs get ShutdownTimeout, then are cancelled
// (shutdown_cancelling_runs). Under Work, ctx is the worker lease's term,
// and the runs were cancelled with it (they act only while the lease is
// trusted): a term that ends with runs in flight says so as
// worker_term_ended_cancelling_runs, whether the term ended for a lost
// lease or after a shutdown's drain, and drain only waits for them.
func (s *Scheduler) drain(ctx context.Context, cancel context.CancelFunc, wg *sync.WaitGroup, term bool) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	if term {
		if n := len(s.sem); n > 0 {
			s.log.Warn("worker_term_ended_cancelling_runs", slog.Int("runs", n))
		}
		cancel()
		<-done
		return
	}
	t := time.NewTimer(s.cfg.ShutdownTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.log.Warn("shutdown_cancelling_runs", slog.Duration("after", s.cfg.ShutdownTimeout))
		cancel()
		<-done
	}
}
