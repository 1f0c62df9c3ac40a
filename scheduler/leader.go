package scheduler

import (
	"container/heap"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// refreshPage is how many changed rows one refresh query reads.
const refreshPage = 1000

// Lead is leader-mode dispatch for the term of tok; call it from the
// elector's OnStartedLeading. It rebuilds the schedule, re-checks leadership
// before the first run, then refreshes and executes until ctx ends (the
// lease is lost or the node stops). Every claim and every write of a run is
// fenced by the lease through gate. Runs in flight when ctx ends are
// cancelled; their outcome writes are fenced and fail once the gate has
// closed, so they stay "running" until the next leader marks them abandoned
// and retries the occurrence with the same idempotency key — not before the
// gate's PriorTermsEnd, when the previous holder can no longer be sending
// it. To let them finish on a planned shutdown, call Drain before ending
// ctx. Lead returns once they have all returned.
//
// A rebuild or refresh that fails is retried with backoff, dispatching
// nothing meanwhile; if none succeeds within DispatchFailureLimit, Lead
// resigns the term through the gate (unless KeepLeaseOnDispatchFailure) and
// returns the error, so that a leader never holds the lease without
// dispatching.
func (s *Scheduler) Lead(ctx context.Context, gate Gate, tok sqlease.Token) (err error) {
	l := &leader{s: s, gate: gate, tok: tok, sched: newSchedule(), failed: map[int64]int{}, running: map[int64]bool{}, ended: map[int64]bool{}, endedNext: map[int64]sqlstore.ScheduleEntry{},
		finished: make(chan sqlstore.ScheduleEntry, s.cfg.MaxConcurrent), claims: make(chan claimResult, cap(s.leaderSem)),
		claiming: make(chan struct{}, maxClaiming), occPoke: make(chan struct{}, 1), reads: make(chan schedRead)}
	if s.store.Batched() {
		l.claiming = make(chan struct{}, maxClaimingBatched)
	}
	if p, ok := gate.(priorTerms); ok {
		l.settled = p.PriorTermsEnd(tok)
	}
	s.setPhase(PhaseStarting, nil)
	defer s.setPhase("", nil)
	if s.store.Batched() {
		// Outcomes are written in groups, each in one fenced transaction,
		// or in one statement that fences itself.
		var direct directFinish
		if g, ok := gate.(leaseStoreGate); ok && s.store.SelfFenced(g.LeaseStore()) {
			l.selfFenced = true
			if s.store.HasClaimAhead() {
				l.ahead = claimAhead
				if d := time.Duration(testClaimAhead.Load()); d > 0 {
					l.ahead = d
				}
			}
			direct = func(ctx context.Context, reqs []sqlstore.FinishReq) ([]bool, error) {
				if err := gate.Ensure(tok); err != nil {
					return nil, err
				}
				return s.store.FinishRunsFenced(ctx, tok, reqs)
			}
		}
		l.fin = startFinisherDirect(s.store, cap(s.leaderSem), func(ctx context.Context, fn func(*sql.Tx) error) error {
			return gate.Fenced(ctx, tok, fn)
		}, direct, finishLinger, s.cfg.Observer)
		defer l.fin.stop() // after wg.Wait: every run's finish is written by then
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	// Returning ends everything Lead started (prune, runs), also on failure.
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer func() {
		if err != nil && parent.Err() == nil {
			s.log.Error("dispatch_failed", slog.Int64("lease_epoch", tok.Epoch), slog.String("error", err.Error()))
			if r, ok := gate.(resigner); ok && !s.cfg.KeepLeaseOnDispatchFailure {
				r.Resign(tok, "dispatcher failed: "+err.Error())
			}
		}
	}()
	if err := l.rebuild(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("rebuild schedule: %w", err)
	}
	if err := l.awaitGate(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("leadership lost during schedule rebuild: %w", err)
	}
	s.setPhase(PhaseRunning, nil)
	s.log.Info("schedule_rebuilt", slog.Int64("lease_epoch", tok.Epoch), slog.Int("entries", l.sched.Len()))
	// Claims that found nothing cost a fenced transaction each: a leader
	// that makes many is scheduling from stale reads.
	defer func() {
		s.log.Info("dispatch_ended", slog.Int64("lease_epoch", tok.Epoch), slog.Int("claims_missed", l.missed))
	}()
	wg.Add(1)
	go func() { defer wg.Done(); s.prune(ctx) }()

	// With a change feed, refresh when told (at most once per
	// RefreshInterval) and otherwise only every FallbackRefresh, so an idle
	// leader costs the database almost nothing.
	every := s.cfg.RefreshInterval
	if s.cfg.Changes != nil {
		// Never so rare that the horizon reload below comes late.
		every = min(s.cfg.FallbackRefresh, s.cfg.ScheduleHorizon/2)
	}
	lastRefresh := time.Now()
	refresh := time.NewTimer(every)
	defer refresh.Stop()
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	healthy := true // a failed refresh stops dispatch until one succeeds
	var failingSince time.Time
	// A refresh or reload reads in a goroutine (startRefresh, startReload)
	// and the loop applies what it read when it comes (l.reads): the read
	// of the rows changed in the last second took 15–28 ms on SQLite at
	// 1,000 due jobs/s, and every start due meanwhile waited for it.
	// reading: a read is in flight (then refresh.C is not listened to);
	// rearmed: the timer was reset meanwhile (a change, a used-up window),
	// which the read's end then leaves as it is.
	reading, rearmed := false, false
	rearm := func(d time.Duration) {
		rearmed = reading
		refresh.Reset(d)
	}
	// The loop turns at least once per refresh period: a longer silence
	// means it is stuck (a statement that hangs), which Dispatch reports.
	// A read in flight counts as the loop standing still, as when the loop
	// read itself: a read that hangs is reported.
	s.setLoopBound(2*max(every, s.cfg.RefreshInterval) + 5*time.Second)
	for {
		if !reading {
			s.loopTurned()
		}
		if healthy {
			l.claimOccurrences(ctx, &wg)
			l.dispatchDue(ctx, &wg)
			if l.windowUsedUp() {
				// A window cut short by MaxScheduled is used up: load the
				// next one now, not at the next refresh, or a backlog
				// larger than the window stalls between windows.
				l.truncated = false
				rearm(0)
			}
		}
		due.Reset(l.untilNext())
		refreshC := refresh.C
		if reading {
			refreshC = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case r := <-l.claims:
			l.bookClaim(ctx, r)
		case f := <-l.finished:
			// A run finished: schedule its job's next occurrence now rather
			// than at the next refresh (which re-reads it anyway).
			l.runEnded(f)
		case <-due.C:
		case <-l.occPoke:
			l.occAt = time.Time{} // claim occurrences now
		case <-s.cfg.Changes:
			rearm(max(s.cfg.RefreshInterval-time.Since(lastRefresh), 0))
		case <-refreshC:
			lastRefresh = time.Now()
			reading = true
			if l.reloadDue() {
				// A reload reads the whole window afresh (as a term's
				// first does), so a refresh before it is read for
				// nothing: after a bulk create, every row of the backlog
				// for as long as they are within RefreshOverlap. It also
				// stands for the refresh whose place it takes: what it read
				// is not read again, but for the overlap before it.
				l.lastRefresh = l.estNow()
				l.startReload(ctx, &wg)
			} else {
				l.startRefresh(ctx, &wg)
			}
		case r := <-l.reads:
			if ctx.Err() != nil {
				return nil // the read's error is the term's end
			}
			err := r.err
			if err == nil {
				if !r.reload {
					l.applyChanged(r.rows)
					if !r.last {
						break // more pages come
					}
				} else {
					l.applyWindow(r.rows, r.now, r.at)
					l.sawClock(r.clock, r.clockAt)
				}
			}
			l.setReading(false)
			if err == nil && !r.reload && l.reloadDue() {
				l.startReload(ctx, &wg)
				break
			}
			reading = false
			healthy = err == nil
			if healthy {
				if !failingSince.IsZero() {
					s.log.Info("schedule_refresh_recovered", slog.Duration("failed_for", time.Since(failingSince)))
				}
				failingSince = time.Time{}
				s.setPhase(PhaseRunning, nil)
				if !rearmed {
					refresh.Reset(every)
				}
				rearmed = false
				break
			}
			rearmed = false
			s.log.Error("schedule_refresh_failed", slog.String("error", err.Error()))
			if failingSince.IsZero() {
				failingSince = lastRefresh
			}
			s.setPhase(PhaseFailing, err)
			if time.Since(failingSince) >= s.cfg.DispatchFailureLimit {
				return fmt.Errorf("schedule refresh failing for %s: %w", time.Since(failingSince).Round(time.Millisecond), err)
			}
			// Retry soon, within the limit.
			refresh.Reset(min(s.cfg.RefreshInterval, max(s.cfg.DispatchFailureLimit-time.Since(failingSince), time.Millisecond)))
		}
	}
}

// schedRead is what a refresh or reload read, handed to the loop: a
// reload's window, or one page of a refresh's changed rows.
type schedRead struct {
	reload bool
	rows   []sqlstore.ScheduleEntry
	now    time.Time // reload: the database's clock as it read
	at     time.Time // reload: the local clock as the read returned
	// clock and clockAt: a quick reading of the database's clock after a
	// long read, and when its answer arrived (readClock; zero: none).
	clock, clockAt time.Time
	last           bool // refresh: the last page (also on an error)
	err            error
}

// reloadDue reports whether the window is half used up.
func (l *leader) reloadDue() bool {
	return l.estNow().After(l.loadedUntil.Add(-l.s.cfg.ScheduleHorizon / 2))
}

// testScheduleReadDelay, set by tests, makes each refresh and reload read
// of the dispatch loop (not a term's first) wait that long first: a slow
// database.
var testScheduleReadDelay atomic.Int64

func slowRead(ctx context.Context) {
	if d := time.Duration(testScheduleReadDelay.Load()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// testScheduleAnswerDelay, set by tests, makes the answer of each load
// of the window (a term's first included) arrive that much after the
// database read its clock: a long read, as of a large window.
var testScheduleAnswerDelay atomic.Int64

func slowAnswer(ctx context.Context) {
	if d := time.Duration(testScheduleAnswerDelay.Load()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// sendRead hands a read to the loop, unless the term has ended.
func (l *leader) sendRead(ctx context.Context, r schedRead) bool {
	select {
	case l.reads <- r:
		return true
	case <-ctx.Done():
		return false
	}
}

// startReload reads the window in a goroutine (reload's read); the loop
// applies it (applyWindow).
func (l *leader) startReload(ctx context.Context, wg *sync.WaitGroup) {
	l.setReading(true)
	wg.Add(1)
	go func() {
		defer wg.Done()
		slowRead(ctx)
		l.sendRead(ctx, l.loadWindow(ctx))
	}()
}

// loadWindow reads the jobs due within the horizon, with the database's
// clock as it read them, and a quick reading of that clock after a long
// read (readClock).
func (l *leader) loadWindow(ctx context.Context) schedRead {
	sent := time.Now()
	entries, now, err := l.s.store.DueWindow(ctx, l.s.cfg.ScheduleHorizon, l.s.cfg.MaxScheduled)
	slowAnswer(ctx)
	r := schedRead{reload: true, rows: entries, now: now, at: time.Now(), last: true, err: err}
	if err == nil {
		r.clock, r.clockAt = l.readClock(ctx, sent, r.at)
	}
	return r
}

// startRefresh reads, in a goroutine, every job row with an occurrence to
// come modified since the previous refresh (see refreshFrom), a page at a
// time; the loop applies each page (applyChanged). Re-reading the overlap
// is idempotent (each row sets its entry to the row's current state) and
// catches a row stamped before hw whose transaction committed after the
// previous refresh read past it.
func (l *leader) startRefresh(ctx context.Context, wg *sync.WaitGroup) {
	t, id := refreshFrom(l.hw, l.hwID, l.lastRefresh, l.s.cfg.RefreshOverlap)
	l.lastRefresh = l.estNow()
	l.setReading(true)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			slowRead(ctx)
			rows, err := l.s.store.Changed(ctx, t, id, refreshPage)
			last := err != nil || len(rows) < refreshPage
			if !l.sendRead(ctx, schedRead{rows: rows, last: last, err: err}) || last {
				return
			}
			t, id = rows[len(rows)-1].LastModifiedAt, rows[len(rows)-1].ID
		}
	}()
}

type leader struct {
	s    *Scheduler
	gate Gate
	// selfFenced: claims and finishes fence themselves in one statement
	// (leaseStoreGate).
	selfFenced bool
	tok        sqlease.Token
	sched      *schedule
	fin        *finisher // groups finish writes (Store.Batched), else nil
	// ahead is how far past the entries due now a claim reaches
	// (claimAhead; 0: only what is due), where the claim fences itself.
	ahead time.Duration
	// settled is the gate's PriorTermsEnd: an occurrence whose attempt an
	// earlier term started (and may still be sending) is not retried
	// before it.
	settled time.Time

	// The database clock as of the last full load, carried forward on the
	// local monotonic clock, and moved on by each claim's now (sawClock).
	// It only decides when to try a claim; the claim itself compares in
	// database time.
	dbNow, localAt time.Time
	// loadedUntil: every unpaused job due before it is in sched (or running).
	loadedUntil time.Time
	// truncated: MaxScheduled cut the window short of the horizon.
	truncated bool
	// hw is the highest last_modified_at seen; refreshes re-read from
	// hw - RefreshOverlap. hwID is the id of the row at hw when a refresh
	// read it (the cursor's position), 0 when hw comes from a reload.
	hw   time.Time
	hwID int64
	// lastRefresh is the (estimated) database time the last refresh began.
	lastRefresh time.Time
	// failed counts the claims that found nothing to claim, per job in
	// sched waiting for its retry.
	failed map[int64]int
	// missed counts every claim of a job that found nothing to claim.
	missed int

	mu sync.Mutex
	// running: the jobs executing now, which reloads and refreshes leave
	// out. While one reads (reading), ended holds the jobs that stopped
	// running meanwhile, which it leaves out too: what it read of them may
	// predate their finish, and a one-off job scheduled again from such a
	// read was claimed for nothing (2 % of a 100,000-job backlog, each
	// claim retried 5 times).
	running map[int64]bool
	reading bool
	ended   map[int64]bool
	// endedNext: the next occurrences that runs ending while a read is in
	// flight handed back.
	endedNext map[int64]sqlstore.ScheduleEntry
	finished  chan sqlstore.ScheduleEntry
	claims    chan claimResult // the outcome of each claim dispatchDue started
	claiming  chan struct{}    // bounds the claims in flight
	reads     chan schedRead   // what a refresh or reload read (startRefresh, startReload)

	// Overlap allow jobs' occurrences (allow.go): occAt is when the
	// leader last claimed those that need an owner; occPoke asks for a
	// claim now (a retry's backoff is over).
	occAt   time.Time
	occPoke chan struct{}
}

func (l *leader) isRunning(id int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.running[id] || l.ended[id]
}

// runsNow reports whether the job runs (ended aside).
func (l *leader) runsNow(id int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.running[id]
}

// setReading brackets a reload or refresh (see ended).
func (l *leader) setReading(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reading = on
	clear(l.ended)
	clear(l.endedNext)
}

func (l *leader) setRunning(id int64, on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if on {
		l.running[id] = true
	} else {
		delete(l.running, id)
		if l.reading {
			l.ended[id] = true
		}
	}
}

func (l *leader) estNow() time.Time { return l.dbNow.Add(time.Since(l.localAt)) }

// loadTripQuick is the longest load of the window (from its sending to its
// answer) whose reading of the database clock is taken as it is: a longer
// one is followed by a quick reading (readClock).
const loadTripQuick = 2 * time.Millisecond

// readClock reads the database clock once more when a load sent at sent
// answered at at, too long after for its reading to be close (see
// sawClock): a large window's read. It returns the reading and when its
// answer arrived, or zeros (a quick load, or a failed read: the claims
// correct the clock then). A load comes every ScheduleHorizon/2, so this
// is a statement per half horizon at most, and none while the window is
// small (an idle leader's).
func (l *leader) readClock(ctx context.Context, sent, at time.Time) (time.Time, time.Time) {
	if at.Sub(sent) <= loadTripQuick {
		return time.Time{}, time.Time{}
	}
	now, err := l.s.store.Now(ctx)
	if err != nil {
		return time.Time{}, time.Time{}
	}
	return now, time.Now()
}

// sawClock takes a reading of the database clock, now, whose answer
// arrived at the local instant at: the database read now no later than at,
// so now - at is a lower bound of how far its clock is ahead of this
// host's. estNow keeps the highest bound since the last load: a reading is
// behind by its whole trip, and a load's trip is its read of the whole
// window (tens of milliseconds for 10,000 jobs), which a quick claim's
// trip corrects (readClock, then every claim). Lagging, the leader tried
// each claim that much late, and claimed ahead (l.ahead) nothing: at a
// trickle of 1,000 jobs a second every run started 2–8 ms late, six at a
// time (-bench trickle). A load starts afresh from its own readings, so
// that a drift of either clock is followed.
func (l *leader) sawClock(now, at time.Time) {
	if !now.IsZero() && !at.IsZero() && now.Sub(at) > l.dbNow.Sub(l.localAt) {
		l.dbNow, l.localAt = now, at
	}
}

// rebuild is the first reload of a term, retried with backoff while it
// fails, for at most DispatchFailureLimit.
func (l *leader) rebuild(ctx context.Context) error {
	start, wait := time.Now(), 20*time.Millisecond
	for {
		err := l.reload(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		left := l.s.cfg.DispatchFailureLimit - time.Since(start)
		if left <= 0 {
			return fmt.Errorf("failing for %s: %w", time.Since(start).Round(time.Millisecond), err)
		}
		if gerr := l.gate.Ensure(l.tok); gerr != nil {
			return fmt.Errorf("%w (and leadership lost: %w)", err, gerr)
		}
		l.s.setPhase(PhaseFailing, err)
		l.s.log.Warn("schedule_rebuild_failed", slog.Int64("lease_epoch", l.tok.Epoch), slog.String("error", err.Error()),
			slog.Duration("retry_in", wait))
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// awaitGate returns once the term's gate is open. A term may begin with it
// closed and still be live: an advisory term whose acquire was answered
// late opens it at its first renew. Resigning such a term would cost the
// fleet a second failover, so Lead waits for the gate, at most
// DispatchFailureLimit; the term's end (ctx) ends the wait at once.
func (l *leader) awaitGate(ctx context.Context) error {
	start := time.Now()
	for {
		err := l.gate.Ensure(l.tok)
		if err == nil || !errors.Is(err, sqlease.ErrNotLeader) || time.Since(start) >= l.s.cfg.DispatchFailureLimit {
			return err
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// reload replaces the schedule with the jobs due within the horizon (a
// term's first, read in the loop: nothing is dispatched before it).
func (l *leader) reload(ctx context.Context) error {
	l.setReading(true)
	defer l.setReading(false)
	r := l.loadWindow(ctx)
	if r.err != nil {
		return r.err
	}
	l.applyWindow(r.rows, r.now, r.at)
	l.sawClock(r.clock, r.clockAt)
	return nil
}

// runEnded applies the next occurrence a run's end handed back, also while
// a refresh reads, which then leaves the job out (and a reload applies it
// again, in its new window: endedNext).
func (l *leader) runEnded(f sqlstore.ScheduleEntry) {
	l.setRunning(f.ID, false)
	l.applyEntry(f)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reading {
		l.endedNext[f.ID] = f
	}
}

// applyWindow replaces the schedule with a reload's entries, read when the
// database's clock said now and the local one at. The jobs that stopped
// running while it read (ended) keep the entries the loop gave them
// meanwhile (a claim's retry, their next occurrence, which is applied
// again in the new window): their rows may predate that, and a loop that
// read itself set them after the read.
func (l *leader) applyWindow(entries []sqlstore.ScheduleEntry, now, at time.Time) {
	l.dbNow, l.localAt = now, at
	l.loadedUntil = now.Add(l.s.cfg.ScheduleHorizon)
	l.truncated = len(entries) == l.s.cfg.MaxScheduled
	if l.truncated {
		// Full: only what precedes the last entry is known to be complete.
		l.loadedUntil = entries[len(entries)-1].NextRunAt
	}
	var kept []schedEntry
	l.mu.Lock()
	for id := range l.ended {
		if p, ok := l.sched.pos[id]; ok {
			kept = append(kept, l.sched.items[p])
		}
	}
	l.mu.Unlock()
	l.sched.reset()
	for _, e := range kept {
		l.sched.set(e.id, e.next)
	}
	for _, e := range entries {
		// Entries at the boundary are scheduled too: when more jobs than
		// fit share one instant, the loaded ones must run (the rest load
		// once these are done), not wait forever.
		if !e.NextRunAt.After(l.loadedUntil) && !l.isRunning(e.ID) {
			l.sched.set(e.ID, e.NextRunAt)
		}
		if e.LastModifiedAt.After(l.hw) {
			l.hw, l.hwID = e.LastModifiedAt, 0
		}
	}
	if l.hw.IsZero() || now.Before(l.hw) {
		l.hw, l.hwID = now, 0
	}
	for id, e := range l.endedNext {
		// Unless run or retried since (the retry's entry is kept above).
		if !l.sched.has(id) && !l.runsNow(id) {
			l.applyEntry(e)
		}
	}
	for id := range l.failed {
		if !l.sched.has(id) {
			delete(l.failed, id)
		}
	}
}

// applyChanged applies a page of a refresh's rows (startRefresh).
func (l *leader) applyChanged(rows []sqlstore.ScheduleEntry) {
	for _, e := range rows {
		l.apply(e)
		if t, id := e.LastModifiedAt, e.ID; t.After(l.hw) || t.Equal(l.hw) && id > l.hwID {
			l.hw, l.hwID = t, id
		}
	}
}

// refreshFrom is where a refresh starts reading (rows past (t, id)): the
// previous refresh's start minus the overlap, or the cursor (hw, hwID) when
// that is older; the overlap before hw for a term's first refresh.
//
// Only a transaction still in flight when the previous refresh read can
// commit a row that refresh did not see, and its stamp is at most overlap
// older than that read (the overlap bounds the time from a stamp to its
// commit; the estimated clock errs early, by the reload's round trip). So
// rows seen before are re-read only while within the overlap of a refresh:
// a burst of writes (a bulk create) for one overlap, not on every refresh
// until it is twice as old.
func refreshFrom(hw time.Time, hwID int64, lastRefresh time.Time, overlap time.Duration) (time.Time, int64) {
	if lastRefresh.IsZero() {
		return hw.Add(-overlap), 0
	}
	if edge := lastRefresh.Add(-overlap); !hw.Before(edge) {
		return edge, 0
	}
	return hw, hwID // hwID is 0 after a reload: rows at hw are read again
}

func (l *leader) apply(e sqlstore.ScheduleEntry) {
	if l.isRunning(e.ID) {
		return // its finish is re-read within the overlap window
	}
	l.applyEntry(e)
}

// applyEntry is apply of a job known not to run: its finish's entry.
func (l *leader) applyEntry(e sqlstore.ScheduleEntry) {
	delete(l.failed, e.ID)
	if e.Paused || e.NextRunAt.IsZero() || !e.NextRunAt.Before(l.loadedUntil) {
		l.sched.remove(e.ID)
		return
	}
	if l.sched.Len() >= l.s.cfg.MaxScheduled && !l.sched.has(e.ID) {
		// Keep memory bounded: drop the latest entry and shrink the window
		// so that it is loaded again when its time comes.
		last := l.sched.latest()
		l.truncated = true
		if !e.NextRunAt.Before(last.next) {
			l.loadedUntil = e.NextRunAt
			return
		}
		l.sched.remove(last.id)
		l.loadedUntil = last.next
	}
	l.sched.set(e.ID, e.NextRunAt)
}

// windowUsedUp reports whether a window cut short by MaxScheduled has been
// dispatched: nothing of it is left but claims that failed and wait to be
// tried again. Those are not the window: waiting for them (up to five
// tries, 300 ms) held back every job past the window — seen as a 300 ms
// halt near the end of a 20,000-job backlog, where a finish committed
// between the reload's read and its claim left a row that was no longer due.
func (l *leader) windowUsedUp() bool {
	if !l.truncated || l.loadedUntil.After(l.estNow()) {
		return false
	}
	// Called on every turn of the loop: the cost is the smaller of the
	// two, and none while more entries wait than retries.
	if l.sched.Len() > len(l.failed) {
		return false
	}
	for _, e := range l.sched.items {
		if _, ok := l.failed[e.id]; !ok {
			return false
		}
	}
	return true
}

func (l *leader) untilNext() time.Duration {
	if l.sched.Len() == 0 {
		return time.Hour
	}
	return max(l.sched.items[0].next.Sub(l.estNow()), time.Millisecond)
}

// dispatchDue starts every entry whose time has come, while slots are free.
// Due entries are claimed in batches, one at a time: a small one in this
// loop, a large one in a goroutine; where the store does not batch, one
// entry per claim, each in a goroutine of its own so that claims overlap.
// The outcome of each claim made in a goroutine comes back through
// l.claims. Each claim is one fenced transaction, or one statement that
// fences itself.
func (l *leader) dispatchDue(ctx context.Context, wg *sync.WaitGroup) {
	batchMax := 1
	if l.fin != nil {
		batchMax = maxClaimBatch
	}
	for {
		now := l.estNow()
		if l.sched.Len() == 0 || l.sched.items[0].next.After(now) {
			return
		}
		if !l.s.begin() {
			return // draining
		}
		select {
		case l.claiming <- struct{}{}:
		default:
			l.s.inflight.Done()
			return // enough claims in flight: the next result brings us back
		}
		var batch []schedEntry
		full := false
		for len(batch) < batchMax && l.sched.Len() > 0 && l.takes(len(batch), l.sched.items[0].next, now) {
			select {
			case l.s.leaderSem <- struct{}{}:
			default:
				full = true // all slots busy; try again when a run ends
			}
			if full {
				break
			}
			e := l.sched.pop()
			l.setRunning(e.id, true)
			batch = append(batch, e)
		}
		if len(batch) == 0 {
			<-l.claiming
			l.s.inflight.Done()
			return
		}
		wg.Add(1)
		if l.fin != nil && len(batch) <= maxInlineClaim {
			// Inline: one batch is claimed at a time anyway
			// (maxClaimingBatched), and entries falling due meanwhile
			// wait for it either way. A goroutine per claim cost, at a
			// trickle (a claim per due job), its start, stack growth and
			// exit and a wake-up of this loop per result.
			l.claimAndRun(ctx, wg, batch, func(r claimResult) { l.bookClaim(ctx, r) }) // holds the count begin() took
		} else {
			go l.claimAndRun(ctx, wg, batch, l.sendClaim(ctx)) // holds the count begin() took
		}
		if full {
			return
		}
	}
}

// claimAhead is how far past the entry due now the leader's claim reaches:
// the entries due within it are claimed in the same statement, at a
// trickle, and each starts at its own due time (run), so that no start
// waits and one round trip serves several jobs. At 1,000 jobs/s falling
// due 1 ms apart, the leader made one claim statement per job, half of its
// client CPU (-bench trickle, -cpuprofile). It is kept short because what
// it claims is locked, and its one-off runs recorded as running (from
// their occurrence, started_at), before they start: a job paused or
// deleted meanwhile runs all the same, and a term that ends before they
// fall due leaves them to the next leader as interrupted attempts, as it
// does any run it claimed. Measured on PostgreSQL, 1,000 jobs/s (-bench
// trickle and -bench ontime -backlog 0 -ontime-ways leader, interleaved,
// a quiet machine): 2 ms, 0.32 claims per job, client CPU 170–185 µs per
// job (the goal is ≤ 150); 5 ms, 0.16 claims, 120–159 µs, start delay p99
// 3.2–3.8 ms; 10 ms, 0.09 claims, 86–124 µs, but p99 3.7–5.3 ms and p50
// 0.2 ms later (its claims of up to maxInlineClaim rows take longer, and
// the due entry waits for them), too near the on-time goal's 5 ms. (Those
// trickle figures came from a leader whose clock lagged by its first
// load's read, which claimed late rather than ahead: see sawClock. On
// time, the 5 ms window costs 150–205 µs of client CPU per job.)
const claimAhead = 5 * time.Millisecond

// testClaimAhead, set by tests, replaces claimAhead: a scenario that must
// act between a claim and the start of a run claimed ahead needs more than
// 5 ms to do so reliably on a loaded machine.
var testClaimAhead atomic.Int64

// claimAheadSlack is how much further than claimAhead the claim statement
// lets the database claim: the leader's clock is an estimate (it only
// decides when to try), and an entry it thinks within claimAhead that the
// database does not would be missed and retried 20 ms later.
const claimAheadSlack = claimAhead

// takes reports whether dispatchDue adds an entry due at next to a batch of
// n entries: an entry due by now, or, where the leader claims ahead, one due
// within claimAhead of now in a small batch that holds one due now (a
// backlog's batches are not held back for entries yet to fall due).
func (l *leader) takes(n int, next, now time.Time) bool {
	if !next.After(now) {
		return true
	}
	return l.ahead > 0 && n > 0 && n < maxInlineClaim && !next.After(now.Add(l.ahead))
}

// maxClaimBatch bounds the jobs one claim transaction takes. Fewer, larger
// batches cost less per job: each is a fenced transaction (BEGIN, the
// fence's lock and check, COMMIT) whose share lock on the lease row every
// concurrent claim must join. Measured on PostgreSQL, 20,000 due no-op jobs,
// alternating rounds (medians): with a claim and a separate start, 64 per
// batch with 8 in flight 16.9k jobs/s, 128 × 4 19.7k, 256 × 2 20.6k, 512 ×
// 1 18.3k; once the claim also starts the runs (ClaimStartJobs), ten rounds
// each: 256 × 2 22.9k, 512 × 1 24.7k (client and server CPU per job 21 and
// 43 µs against 25 and 51). 512 is also every slot (DefaultBatchedMaxConcurrent).
const maxClaimBatch = 512

// maxInlineClaim is the largest batch the leader claims in its loop
// rather than in a goroutine. A larger one (a backlog's) is claimed in a
// goroutine, as before: its cost is spread over up to maxClaimBatch jobs,
// and it frees the next claim as soon as its statement returns, before
// every run of the batch has started. (Inline for every batch, the
// leader's backlog measured no faster: -bench peer.)
const maxInlineClaim = 16

// claimAndRun claims a batch of due entries, each holding an execution
// slot, starts a run for each one claimed, and books each claim's outcome
// by book: in the loop itself (bookClaim), or sent to it (sendClaim).
func (l *leader) claimAndRun(ctx context.Context, wg *sync.WaitGroup, batch []schedEntry, book func(claimResult)) {
	defer wg.Done()
	defer l.s.inflight.Done()
	var claims []leaderClaim
	if len(batch) == 1 && l.fin == nil {
		claims = []leaderClaim{l.claim(ctx, batch[0].id)}
	} else {
		claims = l.claimBatch(ctx, batch)
	}
	<-l.claiming
	for i, e := range batch {
		r := claims[i]
		book(claimResult{id: e.id, due: e.next, ok: r.ok, aside: r.aside, err: r.err, now: r.c.Now, got: r.got})
		if r.err != nil || !r.ok {
			<-l.s.leaderSem
			continue
		}
		l.s.inflight.Add(1) // while the batch holds its count: never up from zero
		wg.Add(1)
		go l.run(ctx, wg, e.id, &claims[i].c, r.started, r.startAt)
	}
}

// sendClaim books a claim's outcome from a goroutine of its own: it hands
// it to the loop (l.claims), unless the term has ended.
func (l *leader) sendClaim(ctx context.Context) func(claimResult) {
	return func(r claimResult) {
		select {
		case l.claims <- r:
		case <-ctx.Done():
		}
	}
}

// leaderClaim is how the claim of one entry went.
type leaderClaim struct {
	c       sqlstore.Claimed
	started *sqlease.Run // the run the claim started, if any
	// startAt, when not zero, is the local instant a job claimed ahead
	// falls due by the database's clock (see booked): its run starts then.
	startAt time.Time
	got     time.Time // when the claim's answer arrived
	ok      bool      // claimed
	aside   bool      // its row cannot be decoded: set aside (Scheduler.setAside)
	err     error
}

// booked records each claimed job in out (at: its place by job id) and
// returns the starts of the runs its claim did not start but fastStart
// may, under this term's epoch. A job claimed ahead of its due time (its
// next_run_at after the claim's now) starts got + (next_run_at - now) on
// the local clock, got being when the claim's answer arrived: the
// database's clock had reached the claim's now by then, so it has reached
// next_run_at by that instant, and no run starts before its due time. Its
// start, where the claim did not make it, is left to execute at that
// instant: a start written now would record it as begun now.
func (l *leader) booked(claimed []sqlstore.Claimed, at map[int64]int, out []leaderClaim, got time.Time) []sqlstore.StartReq {
	var reqs []sqlstore.StartReq
	for _, c := range claimed {
		out[at[c.ID]] = leaderClaim{c: c, ok: true, started: c.Started, got: got}
		if c.NextRunAt.After(c.Now) {
			out[at[c.ID]].startAt = got.Add(c.NextRunAt.Sub(c.Now))
			continue
		}
		if c.Started != nil {
			continue
		}
		if req, ok := fastStart(c); ok {
			req.RunEpoch = l.tok.Epoch
			reqs = append(reqs, req)
		}
	}
	return reqs
}

// claimBatch claims the batch's jobs in one fenced transaction and starts,
// in it, the runs of those whose due occurrence simply runs (fastStart); the
// others are left to execute. A failed transaction fails every claim.
func (l *leader) claimBatch(ctx context.Context, batch []schedEntry) []leaderClaim {
	out := make([]leaderClaim, len(batch))
	ids := make([]int64, len(batch))
	at := make(map[int64]int, len(batch))
	for i, e := range batch {
		ids[i], at[e.id] = e.id, i
	}
	if l.selfFenced {
		if done, ok := l.claimBatchSelfFenced(ctx, ids, at, out); ok {
			return done
		}
	}
	err := l.gate.Fenced(ctx, l.tok, func(tx *sql.Tx) error {
		clear(out)
		// One-off jobs are started by the claim itself where the store can.
		claimed, err := l.s.store.ClaimStartJobs(ctx, tx, ids, l.tok)
		var bad *sqlstore.CorruptClaims
		if errors.As(err, &bad) {
			// Set aside in the claim's transaction: the others run.
			if err = l.s.setAside(ctx, tx, bad); err == nil {
				for _, c := range bad.Rows {
					out[at[c.Lock.JobID]] = leaderClaim{aside: true}
				}
			}
		}
		if err != nil {
			return err
		}
		reqs := l.booked(claimed, at, out, time.Now())
		started, err := l.s.store.StartRuns(ctx, tx, reqs)
		if err != nil {
			return err
		}
		l.markStarted(out, at, reqs, started)
		return nil
	})
	if err != nil {
		for i := range out {
			out[i] = leaderClaim{err: err}
		}
	}
	return out
}

// markStarted records in out (at: its place by job id) the runs of reqs
// that a start wrote (started), under this term's epoch.
func (l *leader) markStarted(out []leaderClaim, at map[int64]int, reqs []sqlstore.StartReq, started []bool) {
	for k, q := range reqs {
		if started[k] {
			out[at[q.Lock.JobID]].started = &sqlease.Run{JobID: q.Lock.JobID, Job: q.Job, ScheduledFor: q.ScheduledFor,
				Attempt: q.Attempt, Holder: q.Lock.Holder, Epoch: l.tok.Epoch, Outcome: sqlease.OutcomeRunning}
		}
	}
}

// leaseStoreGate is a Gate that tells whose leases it holds
// (election.Elector.LeaseStore): where they are the store's, the leader's
// claims and finishes fence themselves in their one statement
// (sqlstore.Store.SelfFenced).
type leaseStoreGate interface {
	LeaseStore() sqlease.LeaseStore
}

// claimBatchSelfFenced is claimBatch in one statement that fences itself
// (sqlstore.Store.ClaimStartJobsFenced), after the gate's check: one round
// trip instead of a fenced transaction's five. The runs of claimed jobs the
// statement did not start but fastStart may, and the rows it could not
// decode, are then written in a fenced transaction of their own: their jobs
// stay locked under this term meanwhile. Should that transaction fail, the
// claims stand (they committed) and execute starts their runs, in a fenced
// transaction each, as it does a run StartRuns did not start; an undecoded
// row's claim fails, and the next claim takes it again (its own term's
// lock, ClaimStartJobs). A failed statement fails every claim, as a failed
// transaction does: one whose commit was lost with its reply is taken again
// by the next claim likewise. ok is false when
// the statement claimed nothing, which it also does when its fence fails:
// the caller then claims in a fenced transaction, which tells which.
func (l *leader) claimBatchSelfFenced(ctx context.Context, ids []int64, at map[int64]int, out []leaderClaim) ([]leaderClaim, bool) {
	fail := func(err error) ([]leaderClaim, bool) {
		for i := range out {
			out[i] = leaderClaim{err: err}
		}
		return out, true
	}
	if err := l.gate.Ensure(l.tok); err != nil {
		return fail(err)
	}
	var claimed []sqlstore.Claimed
	var err error
	if l.ahead > 0 && len(ids) <= maxInlineClaim {
		// A trickle's batch (a backlog's larger ones hold no entry ahead:
		// see takes, and they keep the statement measured for them).
		claimed, err = l.s.store.ClaimStartJobsAheadFenced(ctx, l.tok, ids, l.ahead+claimAheadSlack)
	} else {
		claimed, err = l.s.store.ClaimStartJobsFenced(ctx, l.tok, ids)
	}
	got := time.Now()
	var bad *sqlstore.CorruptClaims
	if err != nil && !errors.As(err, &bad) {
		return fail(err)
	}
	if len(claimed) == 0 && bad == nil {
		return nil, false
	}
	reqs := l.booked(claimed, at, out, got)
	if len(reqs) == 0 && bad == nil {
		return out, true
	}
	var started []bool
	if bad == nil && l.s.store.HasStartRunsFenced() {
		// One statement that fences itself, as the claim did. A run it
		// did not start (the fence failed, or it found the attempt in the
		// ledger) is started by execute in a fenced transaction, which
		// tells which; the claims stand either way.
		if err = l.gate.Ensure(l.tok); err == nil {
			started, err = l.s.store.StartRunsFenced(ctx, l.tok, reqs)
		}
		if err != nil {
			return out, true
		}
		l.markStarted(out, at, reqs, started)
		return out, true
	}
	err = l.gate.Fenced(ctx, l.tok, func(tx *sql.Tx) (err error) {
		if bad != nil {
			if err := l.s.setAside(ctx, tx, bad); err != nil {
				return err
			}
		}
		started, err = l.s.store.StartRuns(ctx, tx, reqs)
		return err
	})
	if bad != nil {
		for _, c := range bad.Rows {
			out[at[c.Lock.JobID]] = leaderClaim{aside: err == nil, err: err}
		}
	}
	if err != nil {
		// The claims stand (committed): the runs not started yet are
		// started by execute, in a fenced transaction of their own, as
		// those of a claim whose StartRuns found them taken.
		return out, true
	}
	l.markStarted(out, at, reqs, started)
	return out, true
}

// run executes a claimed job (its run already started when started is not
// nil) and hands the job's next occurrence back to the loop; it holds an
// execution slot, an inflight count and a wg count.
//
// A job claimed ahead (startAt not zero) starts at startAt, once the gate
// is open: the term's end stops it from starting, and its attempt is left
// to the next leader as any claimed run's whose holder stopped.
func (l *leader) run(ctx context.Context, wg *sync.WaitGroup, id int64, claimed *sqlstore.Claimed, started *sqlease.Run, startAt time.Time) {
	var once sync.Once
	release := func() { once.Do(func() { <-l.s.leaderSem }) }
	// done ends the run: it hands the job's next occurrence to the loop
	// (zero: unknown, the next refresh reads it).
	// handed: an overlap allow job's claim spawned its occurrence and
	// handed the job back to the loop (spawned): this run is the
	// occurrence's, and the job is no longer this run's to hand back.
	handed := false
	claimedAt := time.Now()
	done := func(next time.Time) {
		release()
		if handed {
			l.occurrenceEnded(next, claimed.Now, claimedAt)
		} else if next.IsZero() {
			l.setRunning(id, false)
		} else {
			select {
			case l.finished <- sqlstore.ScheduleEntry{ID: id, NextRunAt: next}:
			case <-ctx.Done():
				l.setRunning(id, false)
			}
		}
		l.s.inflight.Done()
		wg.Done()
	}
	if !startAt.IsZero() {
		if !l.awaitStart(ctx, startAt) {
			done(time.Time{}) // the next reload reads it
			return
		}
		// The database's clock has reached at least this (see booked):
		// what execute and the finish reckon from, as from a claim now.
		claimed.Now = claimed.NextRunAt.Add(time.Since(startAt))
		claimedAt = time.Now()
		if started == nil {
			started = l.startAhead(ctx, claimed)
		}
	}
	fenced := func(ctx context.Context, fn func(*sql.Tx) error) error { return l.gate.Fenced(ctx, l.tok, fn) }
	queued := false
	d := dispatch{epoch: l.tok.Epoch, fenced: fenced, ensure: func() error { return l.gate.Ensure(l.tok) }, until: untilOf(l.gate, l.tok),
		batch: l.fin, queued: &queued, done: done, release: release, settled: l.settled,
		stored: l.tok.Epoch, spawned: func(next time.Time) { handed = true; l.handBack(ctx, id, next) }}
	var next time.Time
	if started != nil {
		next = l.s.runStarted(ctx, claimed, *started, d, l.s.runLogger(claimed))
	} else {
		next = l.s.execute(ctx, claimed, d)
	}
	if !queued {
		done(next)
	}
}

// awaitStart is awaitStartAt under the leader's gate.
func (l *leader) awaitStart(ctx context.Context, at time.Time) bool {
	return awaitStartAt(ctx, at, func() error { return l.gate.Ensure(l.tok) })
}

// startAhead starts, at its due time, the run of a job claimed ahead that
// its claim did not start (a recurring job's) but fastStart may, in one
// statement that fences itself, as claimBatchSelfFenced starts those of the
// jobs it claims when due. nil: not started, left to execute (which starts
// it in a fenced transaction and tells why it could not).
func (l *leader) startAhead(ctx context.Context, c *sqlstore.Claimed) *sqlease.Run {
	req, ok := fastStart(*c)
	if !ok || !l.selfFenced || !l.s.store.HasStartRunsFenced() {
		return nil
	}
	req.RunEpoch = l.tok.Epoch
	if err := l.gate.Ensure(l.tok); err != nil {
		return nil
	}
	started, err := l.s.store.StartRunsFenced(ctx, l.tok, []sqlstore.StartReq{req})
	if err != nil || !started[0] {
		return nil
	}
	return &sqlease.Run{JobID: c.ID, Job: c.Name, ScheduledFor: req.ScheduledFor, Attempt: req.Attempt, Holder: req.Lock.Holder,
		Epoch: l.tok.Epoch, Outcome: sqlease.OutcomeRunning}
}

// mustWait reports whether a claimed job's due occurrence may have an
// attempt in flight under an earlier term whose holder may still be acting:
// an attempt of it started, and earlier terms may still act. (Not only
// when the claim took over a lock: the claim that did may have given the
// job back without starting anything, see interrupted.)
func (l *leader) mustWait(c *sqlstore.Claimed) bool {
	return c.Attempt > 0 && time.Now().Before(l.settled)
}

// maxClaiming bounds the leader's claims in flight: enough to overlap their
// round trips, few enough not to open a connection per due job at once
// when a backlog falls due.
const maxClaiming = 8

// maxClaimingBatched is maxClaiming where claims are batched: one claim of
// up to maxClaimBatch jobs at a time, which takes every slot freed while
// the previous one was under way (see maxClaimBatch for the measurements).
const maxClaimingBatched = 1

// claimResult is how a claim made by dispatchDue ended.
type claimResult struct {
	id    int64
	due   time.Time // the entry's time in the schedule
	ok    bool
	aside bool // set aside: not due before corruptRetry
	err   error
	// now and got: the claim's database now and the local instant its
	// answer arrived (sawClock), when it claimed the job.
	now, got time.Time
}

// bookClaim books a claim's outcome. One that failed or found nothing to claim
// — not due in database time yet (the clock is an estimate), locked,
// paused, gone, or a transient error — is looked at again shortly, a few
// times; the next refresh or reload catches anything else.
func (l *leader) bookClaim(ctx context.Context, r claimResult) {
	if r.err == nil && r.ok {
		l.sawClock(r.now, r.got)
		delete(l.failed, r.id)
		return
	}
	l.setRunning(r.id, false)
	if r.err == nil && !r.aside && r.due.After(l.estNow()) {
		// Tried ahead of its time and not taken (not within the claim's
		// reach by the database's clock, say): tried again when due, as
		// if never tried.
		l.sched.set(r.id, r.due)
		return
	}
	if r.aside {
		delete(l.failed, r.id)
		l.sched.set(r.id, l.estNow().Add(corruptRetry))
		return
	}
	if r.err != nil && ctx.Err() == nil {
		l.s.log.Warn("claim_failed", slog.Int64("job_id", r.id), slog.String("error", r.err.Error()))
	}
	if r.err == nil {
		l.missed++
	}
	if l.failed[r.id]++; l.failed[r.id] <= 5 {
		l.sched.set(r.id, l.estNow().Add(time.Duration(l.failed[r.id])*20*time.Millisecond))
	} else {
		delete(l.failed, r.id) // left to the next refresh or reload
	}
}

// startInClaimError is a start that failed inside the claim's transaction,
// rolling the claim back with it.
type startInClaimError struct{ err error }

func (e startInClaimError) Error() string { return e.err.Error() }
func (e startInClaimError) Unwrap() error { return e.err }

// claim is claimBatch for one job where the store has no batch statements:
// it locks the job inside a lease-fenced transaction and, when its due
// occurrence simply runs (onTimeStart), starts that run in the same
// transaction: a fenced transaction less between a due time and the action.
// started is nil when the run is left to execute. A start that fails there
// (a conflict after a crash, say) takes the claim down with it; the claim is
// then made alone, and execute starts the run and handles the failure.
func (l *leader) claim(ctx context.Context, id int64) (r leaderClaim) {
	r.err = l.gate.Fenced(ctx, l.tok, func(tx *sql.Tx) error {
		var err error
		r = leaderClaim{}
		r.c, r.ok, err = l.s.store.ClaimJob(ctx, tx, id, l.tok)
		if bad := (*sqlstore.CorruptClaims)(nil); errors.As(err, &bad) {
			// Set aside in the claim's transaction, which commits.
			err = l.s.setAside(ctx, tx, bad)
			r.aside = err == nil
		}
		if err != nil || !r.ok {
			return err
		}
		if req, on := onTimeStart(r.c); on && !l.mustWait(&r.c) {
			run, err := l.s.store.StartRun(ctx, tx, r.c.Lock, r.c.Name, req.ScheduledFor, req.Attempt, l.tok.Epoch)
			if err != nil {
				return startInClaimError{err}
			}
			r.started = &run
		}
		return nil
	})
	var se startInClaimError
	if errors.As(r.err, &se) && !errors.Is(r.err, sqlease.ErrLeaseLost) && !errors.Is(r.err, sqlease.ErrNotLeader) {
		r.started = nil
		r.err = l.gate.Fenced(ctx, l.tok, func(tx *sql.Tx) error {
			var err error
			r.c, r.ok, err = l.s.store.ClaimJob(ctx, tx, id, l.tok)
			return err
		})
	}
	if r.err != nil {
		return leaderClaim{err: r.err}
	}
	r.got = time.Now()
	return r
}

// schedule is a min-heap of (next, id) with an index by id.
type schedule struct {
	items []schedEntry
	pos   map[int64]int
}

type schedEntry struct {
	id   int64
	next time.Time
}

func newSchedule() *schedule { return &schedule{pos: map[int64]int{}} }

func (s *schedule) Len() int { return len(s.items) }
func (s *schedule) Less(i, j int) bool {
	a, b := s.items[i], s.items[j]
	return a.next.Before(b.next) || (a.next.Equal(b.next) && a.id < b.id)
}
func (s *schedule) Swap(i, j int) {
	s.items[i], s.items[j] = s.items[j], s.items[i]
	s.pos[s.items[i].id], s.pos[s.items[j].id] = i, j
}
func (s *schedule) Push(x any) {
	e := x.(schedEntry)
	s.pos[e.id] = len(s.items)
	s.items = append(s.items, e)
}
func (s *schedule) Pop() any {
	e := s.items[len(s.items)-1]
	s.items = s.items[:len(s.items)-1]
	delete(s.pos, e.id)
	return e
}

func (s *schedule) reset() { s.items, s.pos = s.items[:0], map[int64]int{} }

func (s *schedule) has(id int64) bool { _, ok := s.pos[id]; return ok }

func (s *schedule) set(id int64, next time.Time) {
	if i, ok := s.pos[id]; ok {
		s.items[i].next = next
		heap.Fix(s, i)
		return
	}
	heap.Push(s, schedEntry{id: id, next: next})
}

func (s *schedule) remove(id int64) {
	if i, ok := s.pos[id]; ok {
		heap.Remove(s, i)
	}
}

func (s *schedule) pop() schedEntry { return heap.Pop(s).(schedEntry) }

// latest is the entry due last (a linear scan; only used when full).
func (s *schedule) latest() schedEntry {
	best := 0
	for i := range s.items {
		if s.Less(best, i) {
			best = i
		}
	}
	return s.items[best]
}
