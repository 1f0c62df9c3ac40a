package sqlstore

import (
	"context"
	"time"

	"github.com/sqlease/sqlease"
)

// Warm runs, once and to no effect, the statements a new leader needs first
// — the schedule load, the fence, a claim, a start and a finish — in a
// transaction it rolls back, on one pooled connection. A follower calls it
// now and then so that a takeover finds a live connection whose server
// session has planned them and loaded its caches: on PostgreSQL the first
// run of each on a cold session costs about a millisecond, most of a
// graceful handoff. Every statement matches no row (job id 0, an unusable
// lease name); their "not found" outcomes are the expected ones.
func (s *Store) Warm(ctx context.Context) error {
	if _, _, err := s.DueWindow(ctx, -time.Hour, 1); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, s.d.TxOptions)
	if err != nil {
		return s.classify(err)
	}
	defer func() { _ = tx.Rollback() }()
	tok := sqlease.Token{Name: "sqlease warm-up", Holder: "sqlease warm-up", Epoch: 0}
	_ = s.fence(ctx, tx, s.d.Queries.FenceLock, tok)
	if _, _, err := s.ClaimJob(ctx, tx, 0, tok); err != nil {
		return err
	}
	lock := Lock{JobID: 0, Holder: tok.Holder, Epoch: 0}
	run := sqlease.Run{JobID: 0, Job: tok.Name, ScheduledFor: time.Unix(0, 0), Attempt: 1}
	_, _ = s.StartRun(ctx, tx, lock, run.Job, run.ScheduledFor, 1, 0)
	_ = s.FinishRun(ctx, tx, lock, run, Finish{Outcome: sqlease.OutcomeSucceeded})
	_ = s.fence(ctx, tx, s.d.Queries.FenceCheck, tok)
	return s.classify(tx.Rollback())
}
