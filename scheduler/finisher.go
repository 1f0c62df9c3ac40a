package scheduler

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// maxFinishGroup bounds the runs one finish statement writes.
const maxFinishGroup = 512

// finisher writes the outcomes of runs in groups (group commit): whatever
// finished while the previous statement was in flight goes into the next
// one, so a busy dispatcher pays one statement for many runs while a lone
// run still writes at once. Each run's write stays conditional on its own
// lock (Store.FinishRuns), and each group is written inside fence: as it is
// in claim mode, in one lease-fenced transaction in leader mode.
//
// A run does not wait for its write: it queues its outcome and its
// goroutine ends. The writer logs each outcome and then calls the run's
// done, so whoever waits for the run (a drain) waits for its write too.
// Waiting on a channel per run cost two goroutine switches per run, a
// sixth of claim mode's client CPU.
type finisher struct {
	store  *sqlstore.Store
	fence  fence
	direct directFinish  // if not nil, tried before fence
	linger time.Duration // how long a small group waits for more (see finishLinger)
	// enough queued runs end a linger: finishLingerBelow, or fewer when
	// fewer may be pending — a full queue's next run waits for a place
	// with its slot, and so would every claim.
	enough  int
	obs     Observer
	pending chan struct{} // bounds the runs queued for their finish write
	kick    chan struct{} // 1-buffered: the queue has items
	urge    chan struct{} // 1-buffered: an item was queued whose job falls due before any other queued (by)
	quit    chan struct{}
	wg      sync.WaitGroup

	mu    sync.Mutex
	queue []finishItem
	// by is the earliest by of the queued items (zero: none has one).
	by time.Time
}

type finishItem struct {
	req  sqlstore.FinishReq
	took time.Duration
	log  *runLog
	// next is the job's next occurrence as this finish leaves it.
	next time.Time
	// by is when next falls due on this host's clock (zero: there is no
	// next, or it is not known): the occurrence cannot start before this
	// write, so a linger ends in time for it (finishLead), at once when by
	// has passed already (a job behind its schedule).
	by time.Time
	// done, if not nil, is called once the outcome is written, with next,
	// or failed, with the zero time.
	done func(next time.Time)
}

// directFinish writes a group in one statement that fences itself
// (sqlstore.Store.FinishRunsFenced, after the gate's check).
type directFinish func(ctx context.Context, reqs []sqlstore.FinishReq) ([]bool, error)

// startFinisher starts the writer, for at most maxPending runs waiting to
// be written, each group written inside fence; obs hears of each run once
// its write has returned.
func startFinisher(store *sqlstore.Store, maxPending int, fence fence, obs Observer) *finisher {
	return startFinisherDirect(store, maxPending, fence, nil, 0, obs)
}

// startFinisherDirect is startFinisher whose groups are written by direct
// where it can: a group direct finished no run of (its fence failed, or
// every lock is lost: it wrote nothing) is written inside fence, which
// tells which; a group of fewer than finishLingerBelow runs waits linger
// for more first.
func startFinisherDirect(store *sqlstore.Store, maxPending int, fence fence, direct directFinish, linger time.Duration, obs Observer) *finisher {
	f := &finisher{store: store, fence: fence, direct: direct, linger: linger, enough: min(finishLingerBelow, maxPending), obs: obs, pending: make(chan struct{}, maxPending),
		kick: make(chan struct{}, 1), urge: make(chan struct{}, 1), quit: make(chan struct{})}
	f.wg.Add(1)
	go f.loop()
	return f
}

// stop writes what is queued and ends the writer; finish must not be
// called after it.
func (f *finisher) stop() {
	close(f.quit)
	f.wg.Wait()
}

// finish queues one run's outcome and returns; the writer calls it.done
// after the write. Once the run has a place among the pending writes,
// handOff is called: the run gives its execution slot to the next claim
// while its outcome waits for the next group, so that the database round
// trips of finishing do not hold back execution (the job stays locked
// until the write).
func (f *finisher) finish(it finishItem, handOff func()) {
	f.pending <- struct{}{}
	if handOff != nil {
		handOff()
	}
	f.mu.Lock()
	f.queue = append(f.queue, it)
	sooner := !it.by.IsZero() && (f.by.IsZero() || it.by.Before(f.by))
	if sooner {
		f.by = it.by
	}
	// Enough for a group: a linger under way ends (urge).
	sooner = sooner || len(f.queue) == f.enough
	f.mu.Unlock()
	if sooner {
		select {
		case f.urge <- struct{}{}:
		default:
		}
	}
	select {
	case f.kick <- struct{}{}:
	default: // the writer has been told already
	}
}

func (f *finisher) loop() {
	defer f.wg.Done()
	var group []finishItem
	var reqs []sqlstore.FinishReq
	var linger *time.Timer
	for {
		select {
		case <-f.kick:
		case <-f.quit:
			for group = f.take(group); len(group) > 0; group = f.take(group) {
				reqs = f.write(group, reqs)
			}
			return
		}
		if f.linger > 0 && f.queued() < f.enough {
			// A trickle: wait a little for the runs finishing next, so
			// that one statement writes them together — but not past
			// finishLead before a queued run's job falls due again (by):
			// its next occurrence cannot start before this write, so
			// waiting longer would stall it (a backlog of a wait job,
			// due again at once, drained at 221/s on PostgreSQL, a 3 ms
			// linger per occurrence). A run queued with an earlier by
			// (urge) shortens the wait; finishLingerBelow queued end it:
			// a backlog's runs, finishing together, must not wait (with
			// all slots' runs queued, no claim can be made until the
			// write: a 10 ms linger per batch of 512 cost the leader's
			// backlog a tenth of its throughput).
			end := time.Now().Add(f.linger)
		wait:
			for {
				d := time.Until(f.lingerEnd(end))
				if d <= 0 || f.queued() >= f.enough {
					break
				}
				if linger == nil {
					linger = time.NewTimer(d)
				} else {
					linger.Reset(d)
				}
				select {
				case <-linger.C:
				case <-f.urge:
					linger.Stop()
				case <-f.quit:
					linger.Stop()
					break wait
				}
			}
		}
		// What finished during a write is written at once only when it
		// is enough for a group (a backlog); a trickle's one or two
		// lingers like any other (the kick their finish sent is pending):
		// written at once, they made every other statement a group of
		// one (6.5 runs per statement with a 10 ms linger at 1,000 runs a
		// second).
		for group = f.take(group); len(group) > 0; group = f.take(group) {
			reqs = f.write(group, reqs)
			if f.linger > 0 && f.queued() < f.enough {
				break
			}
		}
	}
}

// finishLinger is how long a finisher lets a group of fewer
// than finishLingerBelow runs wait for more before writing it. A run's
// slot is handed on before its write (finish), so the wait delays no
// start, only the release of the run's job and its recorded finished_at;
// a recurring job's next occurrence, which waits for the write, is
// waited for (finishLead). At a trickle (1,000 one-off jobs a second, one
// falling due each millisecond) a group was one or two runs without a
// linger, three with 3 ms: a statement per three runs, which at 10 ms
// is one per ten (see the leader's trickle in cmd/sqlease-bench).
const (
	finishLinger      = 10 * time.Millisecond
	finishLingerBelow = 16
)

// finishLead is how long before a queued run's job falls due again its
// linger ends: the write's round trip and the loop's scheduling of the
// occurrence, with room for a late wake-up (timers fire up to a
// millisecond late in an idle process) and the estimate of by, late by
// the claim's reply.
const finishLead = 3 * time.Millisecond

// lingerEnd is when a linger that would end at end must end for the
// queued runs' jobs (by).
func (f *finisher) lingerEnd(end time.Time) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.by.IsZero() && f.by.Add(-finishLead).Before(end) {
		return f.by.Add(-finishLead)
	}
	return end
}

// queued is how many outcomes wait for the writer.
func (f *finisher) queued() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.queue)
}

// take moves up to maxFinishGroup queued items into group (reusing its
// array) and returns it.
func (f *finisher) take(group []finishItem) []finishItem {
	clear(group)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queue) <= maxFinishGroup {
		group, f.queue = f.queue, group[:0]
		f.by = time.Time{}
		return group
	}
	group = append(group[:0], f.queue[:maxFinishGroup]...)
	f.queue = f.queue[:copy(f.queue, f.queue[maxFinishGroup:])]
	f.by = time.Time{}
	for _, it := range f.queue {
		if !it.by.IsZero() && (f.by.IsZero() || it.by.Before(f.by)) {
			f.by = it.by
		}
	}
	return group
}

// write writes a group and settles each of its runs; it returns reqs for
// reuse.
func (f *finisher) write(group []finishItem, reqs []sqlstore.FinishReq) []sqlstore.FinishReq {
	reqs = reqs[:0]
	for _, it := range group {
		reqs = append(reqs, it.req)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var done []bool
	err := retryTransient(ctx, func() (err error) {
		if f.direct != nil {
			if done, err = f.direct(ctx, reqs); err != nil || slices.Contains(done, true) {
				return err
			}
		}
		return f.fence(ctx, func(tx *sql.Tx) (err error) {
			done, err = f.store.FinishRuns(ctx, tx, reqs)
			return err
		})
	})
	errs := make([]error, len(group))
	if err != nil && len(group) > 1 && !errors.Is(err, sqlease.ErrFenceFailed) && !errors.Is(err, sqlease.ErrNotLeader) &&
		!errors.Is(err, sqlease.ErrTransient) && ctx.Err() == nil {
		// One run's trouble (a value the database refuses, a constraint)
		// must not cost the others their outcome: write them one by one,
		// so that only the bad one fails.
		done, err = make([]bool, len(group)), nil
		for i := range reqs {
			errs[i] = f.fence(ctx, func(tx *sql.Tx) error {
				d, err := f.store.FinishRuns(ctx, tx, reqs[i:i+1])
				if err == nil {
					done[i] = d[0]
				}
				return err
			})
		}
	}
	for i, it := range group {
		r := it.req
		werr := err
		if werr == nil {
			werr = errs[i]
		}
		if werr == nil && !done[i] {
			werr = fmt.Errorf("finish run %s attempt %d as %s: job lock %d/%s@%d: %w", r.Run.IdempotencyKey(), r.Run.Attempt,
				r.Finish.Outcome, r.Lock.JobID, r.Lock.Holder, r.Lock.Epoch, sqlease.ErrLeaseLost)
		}
		f.obs.RunFinished(r.Run.Job, r.Finish.Outcome, it.took)
		logFinish(it.log, r.Finish, it.took, werr)
		<-f.pending
		if it.done != nil {
			next := it.next
			if werr != nil {
				next = time.Time{}
			}
			it.done(next)
		}
	}
	clear(reqs)
	return reqs
}
