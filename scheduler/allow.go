package scheduler

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// Overlap "allow" (sqlease.OverlapAllow): a job's occurrences run
// concurrently. The job row stays the schedule — claimed as any job's, its
// missed-runs policy deciding the occurrence — but its lock lasts only for
// the spawn: in one (fenced) transaction the claim releases the job at its
// next occurrence and inserts a row for this one, locked to the claimer
// (sqlstore.Store.SpawnOccurrence). The run is then fenced by that row's
// lock exactly as a job's run is by the job row's: heartbeats, checkpoints
// and the finish are conditional on it, a stale or orphaned row is taken
// again (ClaimOccurrences) with the attempt after, and the finish deletes
// it, or unlocks it to be retried. Each occurrence runs exactly once; the
// bound max_concurrent counts the rows, so an occurrence awaiting a retry
// holds its place.

// allowFullWait is how long an overlap allow job whose max_concurrent
// occurrences are in flight is not claimed again: its claim is given back
// with this backoff (not_before), so that claimers do not spin on it, and
// its due occurrence waits — at most this long after a slot frees.
const allowFullWait = 200 * time.Millisecond

// spawn turns the claim c of an overlap allow job into the claim of its
// occurrence at run (see above). It returns that claim, or false and the
// job's next due time (zero: unknown) when nothing is to run now: the
// job's occurrences are at their bound (the claim is given back for
// allowFullWait) or the spawn failed.
func (s *Scheduler) spawn(ctx context.Context, c *sqlstore.Claimed, run time.Time, d dispatch, log *runLog) (*sqlstore.Claimed, time.Time, bool) {
	next, ok := nextAfter(c, run)
	if !ok {
		next = time.Time{}
	}
	var ol sqlstore.Lock
	err := d.fenced(ctx, func(tx *sql.Tx) error {
		var err error
		ol, err = s.store.SpawnOccurrence(ctx, tx, c.Lock, c.Name, run, next, d.stored, c.Schedule.MaxConcurrent)
		return err
	})
	if errors.Is(err, sqlstore.ErrOccurrencesFull) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rerr := d.fenced(rctx, func(tx *sql.Tx) error {
			return s.store.GiveBack(rctx, tx, c.Lock, c.NextRunAt, c.Attempt, allowFullWait)
		}); rerr != nil {
			log.Warn("run_release_failed", slog.String("error", rerr.Error()))
			return nil, time.Time{}, false
		}
		log.Debug("run_waits_for_slot", slog.Time("scheduled_for", run), slog.Int("max_concurrent", c.Schedule.MaxConcurrent))
		return nil, c.Now.Add(allowFullWait), false
	}
	if err != nil {
		log.Warn("run_start_failed", slog.Time("scheduled_for", run), slog.String("error", err.Error()))
		if !errors.Is(err, sqlease.ErrLeaseLost) && !errors.Is(err, sqlease.ErrNotLeader) {
			s.giveBackUnrun(ctx, c, d, log)
		}
		return nil, time.Time{}, false
	}
	if d.spawned != nil {
		d.spawned(next)
	}
	oc := *c
	oc.Lock = ol
	oc.NextRunAt, oc.Attempt, oc.LockedBy, oc.LockEpoch = run, 0, ol.Holder, ol.Epoch
	return &oc, time.Time{}, true
}

// executeOccurrence runs a claimed occurrence of an overlap allow job
// (ClaimOccurrences): its next attempt, once an interrupted predecessor can
// no longer be acting; or, when its last attempt was interrupted, it is
// done (abandoned), as a job's is.
func (s *Scheduler) executeOccurrence(ctx context.Context, c *sqlstore.Claimed, d dispatch, log *runLog) time.Time {
	run, attempt := c.Lock.Occurrence, c.Attempt+1
	if attempt > c.Retry.MaxAttempts {
		log.Warn("run_abandoned", slog.Time("scheduled_for", run), slog.Int("attempt", attempt-1), slog.String("reason", "max attempts reached after the executor stopped heartbeating"))
		if err := d.fenced(ctx, func(tx *sql.Tx) error { return s.store.ReleaseUnrun(ctx, tx, c.Lock, time.Time{}, 0) }); err != nil {
			log.Warn("run_release_failed", slog.String("error", err.Error()))
		}
		return time.Time{}
	}
	return s.startAndRun(ctx, c, run, attempt, d, log)
}

// occurrenceScanPolls is how many poll intervals a claim-mode worker lets
// pass between its reads of the occurrences that need an owner, unless a
// hint falls due (the retry of a run of its own: at once). An idle worker
// pays one read per occurrenceScanPolls polls for it: every poll was
// measured as 3 statements/s more for 3 idle nodes (internal/failover),
// over half of what they cost. What else needs an owner — an occurrence
// whose holder died, or failed and was not retried by it — waits that long
// at most after its lock_timeout or worker lease.
const occurrenceScanPolls = 10

// claimOccurrencesDue claims, for a claim-mode worker (under its lease
// term w when not nil, whose epoch negated is stored), up to limit
// occurrences of overlap allow jobs that need an owner — a retry whose
// backoff has passed, a holder gone — when from says it is time: every
// occurrenceScanPolls polls, and whenever a hint fell due.
func (s *Scheduler) claimOccurrencesDue(ctx context.Context, w *workerTerm, from *claimFrom, stored int64, limit int) []sqlstore.Claimed {
	if !from.occNow && !from.occAgain && time.Since(from.occAt) < occurrenceScanPolls*s.cfg.PollInterval {
		return nil
	}
	hinted := from.occNow
	from.occAt, from.occNow, from.occAgain = time.Now(), false, false
	if w != nil && w.gate.Ensure(w.tok) != nil {
		return nil
	}
	c, err := s.store.ClaimOccurrences(ctx, nil, s.cfg.Holder, stored, limit)
	if err != nil && ctx.Err() == nil {
		s.log.Warn("claim_failed", slog.String("what", "occurrences"), slog.String("error", err.Error()))
	}
	// A hint is the retry's due time as this worker reckons it, which may
	// come a moment before the backoff the database wrote at the finish
	// has passed in database time (a busy machine widens the gap): a read
	// that found nothing then is made again at the next poll, not
	// occurrenceScanPolls polls later.
	from.occAgain = hinted && len(c) == 0 && err == nil
	return c
}

// handBack gives an overlap allow job back to the leader's loop once its
// claim has spawned its occurrence: its next occurrence (zero: none) is
// scheduled at once, while this one runs.
func (l *leader) handBack(ctx context.Context, id int64, next time.Time) {
	select {
	case l.finished <- sqlstore.ScheduleEntry{ID: id, NextRunAt: next}:
	case <-ctx.Done():
		l.setRunning(id, false)
	}
}

// occurrenceEnded asks the loop to claim occurrences when next — a retry
// of the occurrence that ended, or of one given back — falls due; zero:
// nothing to retry (the occurrence is done). dbNow is the database clock at
// the occurrence's claim, read locally at `at` (early rather than late).
func (l *leader) occurrenceEnded(next, dbNow, at time.Time) {
	if next.IsZero() || dbNow.IsZero() {
		return
	}
	time.AfterFunc(max(time.Until(at.Add(next.Sub(dbNow))), 0), func() {
		select {
		case l.occPoke <- struct{}{}:
		default:
		}
	})
}

// claimOccurrences claims, in a fenced transaction, the occurrences of
// overlap allow jobs that need an owner — in flight under an earlier term
// (whose retry execute defers until PriorTermsEnd), awaiting a retry whose
// backoff has passed, or stale — and runs each, while slots are free: at
// most once per RefreshInterval unless poked. An unfenced read first tells
// whether there are any, so that an idle leader pays no fenced transaction.
func (l *leader) claimOccurrences(ctx context.Context, wg *sync.WaitGroup) {
	if time.Since(l.occAt) < l.s.cfg.RefreshInterval {
		return
	}
	l.occAt = time.Now()
	if ok, err := l.s.store.OccurrencesWaiting(ctx, l.tok.Epoch); err != nil || !ok {
		if err != nil && ctx.Err() == nil {
			l.s.log.Warn("claim_failed", slog.String("what", "occurrences"), slog.String("error", err.Error()))
		}
		return
	}
	if !l.s.begin() {
		return // draining
	}
	defer l.s.inflight.Done()
	slots := 0
	for slots < maxClaimBatch {
		select {
		case l.s.leaderSem <- struct{}{}:
			slots++
			continue
		default:
		}
		break
	}
	var claimed []sqlstore.Claimed
	err := l.gate.Fenced(ctx, l.tok, func(tx *sql.Tx) error {
		var err error
		claimed, err = l.s.store.ClaimOccurrences(ctx, tx, l.s.cfg.Holder, l.tok.Epoch, slots)
		return err
	})
	if err != nil {
		claimed = nil
		if ctx.Err() == nil {
			l.s.log.Warn("claim_failed", slog.String("what", "occurrences"), slog.String("error", err.Error()))
		}
	}
	for i := len(claimed); i < slots; i++ {
		<-l.s.leaderSem
	}
	fenced := func(ctx context.Context, fn func(*sql.Tx) error) error { return l.gate.Fenced(ctx, l.tok, fn) }
	for i := range claimed {
		c := &claimed[i]
		l.s.inflight.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer l.s.inflight.Done()
			defer func() { <-l.s.leaderSem }()
			d := dispatch{epoch: l.tok.Epoch, fenced: fenced, ensure: func() error { return l.gate.Ensure(l.tok) }, until: untilOf(l.gate, l.tok),
				settled: l.settled, stored: l.tok.Epoch}
			at := time.Now()
			l.occurrenceEnded(l.s.execute(ctx, c, d), c.Now, at)
		}()
	}
}
