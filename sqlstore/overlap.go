package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sqlease/sqlease"
)

// MaxSkippedPerFinish bounds the occurrences a finish records one by one as
// skipped: a job every 10 ms whose run took an hour would otherwise write
// 360,000 rows in one transaction. The last recorded row's error counts the
// rest, so none is dropped without a word in the ledger.
const MaxSkippedPerFinish = 1000

// Skipped are the occurrences that fell due while a run ran, which its
// job's overlap policy skips (sqlease.OverlapSkip): At, oldest first, at
// most MaxSkippedPerFinish, then More later ones until Last that are
// counted in the last row's error only.
type Skipped struct {
	At     []time.Time
	More   int
	Last   time.Time
	Reason string
}

// FinishRunSkipping is FinishRun that first records each of skip.At as a
// finished run with outcome skipped (attempt 1, the run's holder and epoch)
// and, when b is not nil, sets the job's breaker as FinishRunBreaker does:
// all in one transaction conditional on the lock. It returns
// sqlease.ErrLeaseLost, and changes nothing, when the lock is no longer
// held, and sqlease.ErrConflict when one of the occurrences is in the
// ledger already. Pass tx to run inside an existing (fenced) transaction.
func (s *Store) FinishRunSkipping(ctx context.Context, tx *sql.Tx, l Lock, run sqlease.Run, f Finish, skip Skipped, b *BreakerUpdate) error {
	if len(skip.At) > MaxSkippedPerFinish {
		return fmt.Errorf("finish run %s: %d skipped occurrences, at most %d: %w", run.IdempotencyKey(), len(skip.At), MaxSkippedPerFinish, sqlease.ErrInvalidConfig)
	}
	return s.inTx(ctx, tx, func(tx *sql.Tx) error {
		// The lock first: the rows below are written only under it, and
		// the update holds the job row until the transaction ends.
		var err error
		if b != nil {
			err = s.lockedExec(ctx, tx, s.q().SetBreaker, l, b.Failures, boolInt(b.Open), boolInt(b.Changed))
		} else {
			err = s.fenceWrite(ctx, tx, l)
		}
		if err != nil {
			return fmt.Errorf("finish run %s: %w", run.IdempotencyKey(), err)
		}
		for i, at := range skip.At {
			text := skip.Reason
			if i == len(skip.At)-1 && skip.More > 0 {
				text = fmt.Sprintf("%s (and %d later occurrences until %s, not recorded one by one)", skip.Reason, skip.More, skip.Last.UTC().Format(time.RFC3339Nano))
			}
			one := sqlease.Run{Job: run.Job, JobID: l.JobID, ScheduledFor: at, Attempt: 1}
			if _, err := tx.ExecContext(ctx, s.q().InsertRun, l.JobID, run.Job, s.timeArg(at), 1, l.Holder, run.Epoch); err != nil {
				if s.d.IsUniqueViolation != nil && s.d.IsUniqueViolation(err) {
					return fmt.Errorf("%w: occurrence %s is in the ledger already", sqlease.ErrConflict, one.IdempotencyKey())
				}
				return fmt.Errorf("record skipped %s: %w", one.IdempotencyKey(), s.classify(err))
			}
			if _, err := tx.ExecContext(ctx, s.q().FinishRun, string(sqlease.OutcomeSkipped), CleanText(text), l.JobID, s.timeArg(at), 1); err != nil {
				return fmt.Errorf("record skipped %s: %w", one.IdempotencyKey(), s.classify(err))
			}
		}
		return s.FinishRun(ctx, tx, l, run, f)
	})
}
