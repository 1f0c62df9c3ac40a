package election

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sqlease/sqlease"
)

// runAdvisory is Run in advisory mode. A follower opens a dedicated session
// and blocks in Lock: it costs the database no statements while it waits,
// and it wakes as soon as the leader's session ends — by crash or by Close.
// It then takes the lease row over (epoch + 1) and leads, renewing through
// the locked session; it stops leading the moment that session is lost.
func (e *Elector) runAdvisory(ctx context.Context, callbacks *sync.WaitGroup) {
	// Followers blocked in Lock do not read the lease row; refresh the
	// observed leader now and then for status and OnNewLeader, and at once
	// when a change feed signals.
	obsCtx, stopObs := context.WithCancel(ctx)
	defer stopObs()
	every := 10 * e.cfg.AcquireInterval
	if e.cfg.Changes != nil {
		every = 60 * e.cfg.AcquireInterval
	}
	go e.observeLoop(obsCtx, every)

	backoff := e.cfg.AcquireInterval
	for ctx.Err() == nil {
		lock, err := e.cfg.SessionLocker(ctx, e.cfg.LeaseName)
		if err != nil {
			e.advisoryFailed(ctx, "open session", err, backoff)
			continue
		}
		if err := lock.Lock(ctx); err != nil {
			e.closeLock(ctx, lock)
			e.advisoryFailed(ctx, "lock", err, backoff)
			continue
		}
		sentAt := e.cfg.Clock.Now()
		lease, err := lock.Takeover(ctx, e.cfg.LeaseName, e.cfg.HolderID, e.cfg.LeaseDuration)
		e.obs.AcquireAttempted(e.cfg.LeaseName, e.cfg.Clock.Now().Sub(sentAt), err == nil, err)
		if err != nil {
			e.closeLock(ctx, lock)
			e.advisoryFailed(ctx, "takeover", err, backoff)
			continue
		}
		e.setErr(nil)
		e.lead(ctx, lease, sentAt, callbacks, term{
			renew: lock.Renew,
			lost:  lock.Lost(),
			release: func(ctx context.Context, tok sqlease.Token) error {
				// Free the lock first — the gate is already closed — so
				// that a follower blocked in Lock takes over at once, then
				// expire the row for readers unless it has done so.
				cerr := lock.Close(ctx)
				err := e.cfg.Store.Release(ctx, tok)
				if errors.Is(err, sqlease.ErrLeaseLost) {
					err = nil // taken over already: the handoff worked
				}
				if err == nil {
					err = cerr
				}
				return err
			},
		})
		e.closeLock(ctx, lock) // after a loss; a no-op after resign
		callbacks.Wait()
	}
}

func (e *Elector) closeLock(ctx context.Context, lock sqlease.SessionLock) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.ReleaseTimeout)
	defer cancel()
	_ = lock.Close(cctx)
}

func (e *Elector) advisoryFailed(ctx context.Context, step string, err error, wait time.Duration) {
	if ctx.Err() != nil {
		return
	}
	e.setErr(err)
	attrs := []any{slog.String("step", step), slog.String("sql_error", err.Error())}
	if errors.Is(err, sqlease.ErrSessionLost) {
		attrs = append(attrs, slog.String("hint", "the session did not keep its lock: is a connection pooler in transaction mode between sqlease and the database?"))
	}
	e.log.Warn("leader_acquire_failed", attrs...)
	e.sleep(ctx, e.followWait(sqlease.Lease{}, err)+wait-e.cfg.AcquireInterval)
}

// observeLoop reads the lease row every `every` while this instance follows.
func (e *Elector) observeLoop(ctx context.Context, every time.Duration) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-e.wake:
			t.Stop() // Go ≥ 1.23: no stale tick after Stop, Reset below
		}
		if !e.IsLeader() {
			if l, err := e.cfg.Store.Lease(ctx, e.cfg.LeaseName); err == nil {
				e.setErr(nil)
				e.observe(l)
			}
		}
		t.Reset(every)
	}
}
