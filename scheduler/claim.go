package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sqlease/sqlease"
)

// Run is claim-mode dispatch: until ctx ends, it claims due jobs for
// Config.Holder every PollInterval (at once again when a claim filled a
// whole batch), executes them with heartbeats, and on shutdown gives
// in-flight runs ShutdownTimeout before cancelling them. It returns nil after
// ctx ends and every run has finished.
func (s *Scheduler) Run(ctx context.Context) error {
	if err := sqlease.ValidateHolderID(s.cfg.Holder); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var wg sync.WaitGroup
	defer s.drain(ctx, cancel, &wg)
	wg.Add(1)
	go func() { defer wg.Done(); s.prune(ctx) }()

	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		claimed, asked := s.claimOnce(ctx, runCtx, &wg)
		wait := s.cfg.PollInterval
		if asked > 0 && claimed == asked {
			wait = 0 // as many were due as there was room for: more may be
		}
		timer.Reset(wait)
	}
}

// claimOnce claims as many due jobs as there are free execution slots (at
// most BatchSize) and starts them; it returns how many it claimed and how
// many it asked for.
func (s *Scheduler) claimOnce(ctx, runCtx context.Context, wg *sync.WaitGroup) (int, int) {
	if !s.begin() {
		return 0, 0
	}
	defer s.inflight.Done()
	// Take the slots first so a claimed job never waits for one.
	slots := 0
	for slots < s.cfg.BatchSize {
		if slots == 0 {
			select {
			case s.sem <- struct{}{}:
				slots++
				continue
			case <-ctx.Done():
				return 0, 0
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
	claimed, err := s.store.ClaimDue(ctx, s.cfg.Holder, slots)
	for i := len(claimed); i < slots; i++ {
		<-s.sem
	}
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			s.log.Warn("claim_failed", slog.String("error", err.Error()))
		}
		return 0, slots
	}
	for _, c := range claimed {
		wg.Add(1)
		s.inflight.Add(1)
		go func() {
			defer wg.Done()
			defer s.inflight.Done()
			defer func() { <-s.sem }()
			s.execute(runCtx, c, c.Lock.Epoch, unfenced, nil, true)
		}()
	}
	return len(claimed), slots
}

// drain waits for in-flight runs, cancelling them after ShutdownTimeout.
func (s *Scheduler) drain(ctx context.Context, cancel context.CancelFunc, wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
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
