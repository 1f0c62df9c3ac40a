package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlease/sqlease"
)

// runAdvisory is Run in advisory mode. A follower opens a dedicated session
// and waits in Lock: it wakes as soon as the leader's session ends — by
// crash or by Close — takes the lease row over (epoch + 1) and leads,
// renewing through the locked session; it stops leading the moment that
// session is lost.
//
// The lock is the fast path, not the only one: a leader that is frozen
// (SIGSTOP, a VM pause, a debugger) or cut off keeps its session, and so the
// lock, for as long as that lasts. So while it waits for the lock a follower
// also watches the lease row, reading it when it is due to expire, and
// acquires the lease once it has been expired for AcquireInterval — the
// bound of lease mode, lease_duration + acquire_interval. (The grace leaves
// a released lease to the lock's winner.) It then leads on the lease alone
// while its Lock keeps waiting; the frozen leader is fenced out by the
// epoch, and its gate had closed at its local deadline.
func (e *Elector) runAdvisory(ctx context.Context, callbacks *sync.WaitGroup) {
	handOver := time.Duration(0) // the pause after handing the lock over, grown while it repeats
	for ctx.Err() == nil {
		lock, err := e.cfg.SessionLocker(ctx, e.cfg.LeaseName)
		if err != nil {
			e.advisoryFailed(ctx, "open session", err)
			continue
		}
		p := startLock(ctx, lock)
		lease, sentAt, err := e.awaitLead(ctx, p)
		var resigned bool
		switch {
		case err != nil:
			p.stop()
			e.closeLock(ctx, lock)
			e.advisoryFailed(ctx, "lock", err)
			continue
		case lease.Epoch == 0: // the lock is ours
			resigned, err = e.leadLocked(ctx, lock, callbacks)
			if errors.Is(err, errHandOver) {
				// Free the lock for the live term's holder, whose own
				// Lock waits ahead of ours, and queue again after a
				// pause: once that term holds the lock, its holder's
				// death frees it at once and failover is fast again.
				p.stop()
				e.closeLock(ctx, lock)
				handOver = min(max(2*handOver, e.cfg.RenewInterval), e.cfg.LeaseDuration)
				e.sleep(ctx, handOver)
				continue
			}
			if err != nil {
				e.closeLock(ctx, lock)
				e.advisoryFailed(ctx, "takeover", err)
				continue
			}
			handOver, e.sessionLosses = 0, 0
		default: // the lease expired while another session kept the lock
			resigned = e.leadUnlocked(ctx, lock, p, lease, sentAt, callbacks)
		}
		p.stop()
		e.closeLock(ctx, lock) // after a loss; a no-op after a release
		callbacks.Wait()
		if resigned {
			e.holdOff(ctx)
		}
	}
}

// leadLocked takes the lease over with the lock held and leads through the
// locked session.
func (e *Elector) leadLocked(ctx context.Context, lock sqlease.SessionLock, callbacks *sync.WaitGroup) (resigned bool, err error) {
	lease, sentAt, prior, err := e.takeover(ctx, lock)
	if err != nil {
		return false, err
	}
	// The previous holder's lease may not have expired: a takeover does not
	// wait for a term taken through the lock. It can no longer be renewed
	// (the renew needs the lock, or the epoch), so it expires within its
	// duration of now.
	settled := e.cfg.Clock.Now().Add(prior)
	return e.lead(ctx, lease, sentAt, settled, callbacks, term{
		renew: lock.Renew,
		lost:  lock.Lost(),
		release: func(ctx context.Context, tok sqlease.Token) error {
			// Free the lock first — the gate is already closed — so
			// that a follower blocked in Lock takes over at once, then
			// expire the row for readers unless it has done so.
			cerr := lock.Close(ctx)
			if e.cfg.Clock.Now().Before(settled) {
				// A term this takeover deposed may still be acting
				// until settled: expiring the row now would let a
				// follower acquire it as expired — with no prior term
				// to wait for — and retry beside that sender (the
				// model's finding F2, model/README.md). The next
				// holder takes over through the lock, which waits for
				// nothing and defers retries until settled.
				return cerr
			}
			err := e.cfg.Store.Release(ctx, tok)
			if errors.Is(err, sqlease.ErrLeaseLost) {
				err = nil // taken over already: the handoff worked
			}
			if err == nil {
				err = cerr
			}
			return err
		},
	}), nil
}

// errHandOver is takeover's answer when the lock is ours but a live term
// acquired without it holds the lease: the lock is handed to that term.
var errHandOver = errors.New("sqlease: the lock is handed to a live term acquired without it")

// takeover takes the lease over through the locked session, with the time
// it sent the takeover and how long the term it deposed may still run. A
// live term acquired without the lock is not deposed (the lock's previous
// holder has gone, that term's holder has not: finding F1,
// model/README.md): the follower hands the lock over (errHandOver) — frees
// it, so that the term's holder, whose Lock has been waiting since it
// acquired the lease, takes it and leads through it. Keeping the lock
// instead left that term lock-less for as long as it lasted, and every
// failover from it waited for its lease to expire (issue 31 item 7).
func (e *Elector) takeover(ctx context.Context, lock sqlease.SessionLock) (sqlease.Lease, time.Time, time.Duration, error) {
	prior := e.priorTTL()
	sentAt := e.cfg.Clock.Now()
	lease, err := lock.Takeover(ctx, e.cfg.LeaseName, e.cfg.HolderID, e.cfg.LeaseDuration)
	e.obs.AcquireAttempted(e.cfg.LeaseName, e.cfg.Clock.Now().Sub(sentAt), err == nil, err)
	switch {
	case err == nil:
		e.setErr(nil)
		e.wrote(nil)
		return lease, sentAt, prior, nil
	case !errors.Is(err, sqlease.ErrLeaseHeld):
		if !errors.Is(err, sqlease.ErrSessionLost) {
			e.wrote(err)
		}
		return sqlease.Lease{}, time.Time{}, 0, err
	}
	e.setErr(nil)
	e.wrote(nil)
	if cur, err := e.cfg.Store.Lease(ctx, e.cfg.LeaseName); err == nil {
		e.observe(cur)
	}
	e.log.Info("leader_takeover_deferred",
		slog.String("reason", "the lock is ours, but the lease was acquired without it and is live: the lock is handed to its holder"))
	return sqlease.Lease{}, time.Time{}, 0, errHandOver
}

// leadUnlocked leads on a lease acquired after it expired, renewing through
// the store, while the session's Lock keeps waiting. Once the lock is won,
// it renews through that session, which marks the term as held through the
// lock, and the term ends if that session is lost, as a locked term does. A
// follower that wins the lock first leaves the term to expire (takeover).
func (e *Elector) leadUnlocked(ctx context.Context, lock sqlease.SessionLock, p *pendingLock, lease sqlease.Lease, sentAt time.Time, callbacks *sync.WaitGroup) bool {
	e.log.Warn("leader_acquired_without_lock", slog.Int64("lease_epoch", lease.Epoch),
		slog.String("reason", "the lease expired while another session kept the lock: its holder is frozen or cut off"))
	lost, ended := make(chan struct{}), make(chan struct{})
	defer close(ended)
	var won atomic.Bool
	go func() {
		select {
		case <-p.done:
			if p.err != nil {
				// The term goes on without the lock. Say so (a lock wait
				// stopped by the term's own end is no news): until the
				// term ends, a failover from it waits for its lease to
				// expire instead of for its session to end.
				if !errors.Is(p.err, context.Canceled) {
					e.log.Warn("leader_lock_wait_failed", slog.Int64("lease_epoch", lease.Epoch), slog.String("error", p.err.Error()),
						slog.String("reason", "the term goes on without the lock: a failover from it waits for its lease to expire"))
				}
				return
			}
			won.Store(true)
			e.log.Info("leader_lock_won", slog.Int64("lease_epoch", lease.Epoch))
			select {
			case <-lock.Lost():
				close(lost)
			case <-ended:
			}
		case <-ended:
		}
	}()
	return e.lead(ctx, lease, sentAt, time.Time{}, callbacks, term{
		renew: func(ctx context.Context, tok sqlease.Token, ttl time.Duration) (sqlease.Lease, error) {
			if won.Load() {
				return lock.Renew(ctx, tok, ttl)
			}
			return e.cfg.Store.Renew(ctx, tok, ttl)
		},
		lost: lost,
		release: func(ctx context.Context, tok sqlease.Token) error {
			p.stop()
			cerr := lock.Close(ctx)
			err := e.cfg.Store.Release(ctx, tok)
			if err == nil {
				err = cerr
			}
			return err
		},
	})
}

// pendingLock is a SessionLock.Lock in flight.
type pendingLock struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Lock has returned
	err    error         // Lock's result, once done is closed
}

func startLock(ctx context.Context, lock sqlease.SessionLock) *pendingLock {
	lctx, cancel := context.WithCancel(ctx)
	p := &pendingLock{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.err = lock.Lock(lctx)
	}()
	return p
}

// stop cancels the Lock if it is still waiting and waits for it to return.
// A lock it won stays held (Close frees it).
func (p *pendingLock) stop() {
	p.cancel()
	<-p.done
}

// awaitLead waits for the lock (it returns a zero lease) or for the lease
// to stay expired for AcquireInterval, when it acquires it (the lease and
// the acquire's send time). It returns an error when Lock fails or ctx ends.
func (e *Elector) awaitLead(ctx context.Context, p *pendingLock) (sqlease.Lease, time.Time, error) {
	for {
		select {
		case <-p.done:
			return sqlease.Lease{}, time.Time{}, p.err
		default:
		}
		lease, sentAt, err := e.tryAcquire(ctx, e.cfg.AcquireInterval)
		if err == nil {
			return lease, sentAt, nil
		}
		t := time.NewTimer(e.advisoryWait(lease, err))
		select {
		case <-ctx.Done():
			t.Stop()
			return sqlease.Lease{}, time.Time{}, ctx.Err()
		case <-p.done:
			t.Stop()
		case <-e.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// advisoryWait is how long a follower waiting for the lock leaves the lease
// row alone: until the lease it saw is due to be taken (a renewal moves that
// on, so a follower reads about once per lease duration), at most
// 10 AcquireIntervals (60 with a change feed) so that the observed leader
// stays fresh, and the acquire interval after an error.
func (e *Elector) advisoryWait(cur sqlease.Lease, err error) time.Duration {
	if !errors.Is(err, sqlease.ErrLeaseHeld) || cur.ExpiresAt.IsZero() {
		return e.followWait(cur, err)
	}
	most := 10 * e.cfg.AcquireInterval
	if e.cfg.Changes != nil {
		most = 60 * e.cfg.AcquireInterval
	}
	return min(max(cur.Remaining()+time.Millisecond, time.Millisecond), most)
}

// priorTTL is how long a lease taken over may still run: the lease duration,
// or the observed holder's if it renews for longer.
func (e *Elector) priorTTL() time.Duration {
	d := e.cfg.LeaseDuration
	e.mu.Lock()
	o, ok := e.observed, e.observedOK
	e.mu.Unlock()
	if ok && !o.RenewedAt.IsZero() {
		d = max(d, o.ExpiresAt.Sub(o.RenewedAt))
	}
	return d
}

func (e *Elector) closeLock(ctx context.Context, lock sqlease.SessionLock) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.ReleaseTimeout)
	defer cancel()
	_ = lock.Close(cctx)
}

func (e *Elector) advisoryFailed(ctx context.Context, step string, err error) {
	if ctx.Err() != nil {
		return
	}
	e.setErr(err)
	attrs := []any{slog.String("step", step), slog.String("sql_error", err.Error())}
	if errors.Is(err, sqlease.ErrSessionLost) {
		// Name what was seen: one lost session is most often the database
		// ending it (a restart was the usual case, and the pooler hint
		// misled); only sessions lost again and again point at a pooler.
		e.sessionLosses++
		hint := "the database ended this session (a restart or failover, a terminated backend, an idle-session timeout); a new one is opened"
		if e.sessionLosses >= 3 {
			hint = fmt.Sprintf("%d sessions in a row lost their lock: is a connection pooler in transaction mode between sqlease and the database? Connect directly or through a session-mode pool", e.sessionLosses)
		}
		attrs = append(attrs, slog.String("hint", hint))
	}
	e.log.Warn("leader_acquire_failed", attrs...)
	e.sleep(ctx, e.followWait(sqlease.Lease{}, err))
}
