package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sqlease/sqlease"
)

// OccurrenceQueries is the SQL text of the in-flight occurrence table,
// {prefix}_occurrences, which an overlap "allow" job uses instead of its
// job row's lock (sqlease.OverlapAllow).
//
// Why a table of its own: a job row is the lock of its one occurrence in
// flight (locked_by, lock_epoch, attempt, not_before), which is what keeps
// the occurrences of every other job one at a time. An allow job has
// several in flight, so each gets a row here, keyed (job_id,
// scheduled_for), with the same lock columns and the same meaning: the row
// is the fence of every write its runs make, stale after the job's
// lock_timeout or at once when the worker lease it was taken under is gone,
// and taken again with lock_epoch + 1. The job row itself is locked only
// for the instant of a spawn (InsertLocked after the job lock's release,
// in one transaction), so its next occurrence can be claimed while this
// one runs. A row stays until its occurrence is done (succeeded, or failed
// with no attempt left): in flight, and awaiting a retry, both count
// towards the job's max_concurrent. Its CREATE statement is in
// JobQueries.Migrations. A dialect without it (Insert empty) cannot run
// allow jobs: SpawnOccurrence refuses.
//
// Arguments are listed in order; lock arguments are last, as (job_id,
// scheduled_for, holder, lock_epoch). The stored lease epoch (le) is what
// a claim stores in lock_lease_epoch: minus a claim-mode worker's lease
// epoch, a leader's positive lease epoch, or 0 (no lease).
type OccurrenceQueries struct {
	// Insert: (job_id, job_name, scheduled_for, holder, lock_epoch, le,
	// max_concurrent). Inserts the occurrence locked to holder (attempt
	// 0, locked_at = now) when max_concurrent is 0 or fewer than
	// max_concurrent rows of the job exist. Rows affected: 0 when full.
	Insert string
	// Candidates: (le, limit). job_id, job_name, scheduled_for,
	// lock_epoch and whether it is locked (0 or 1), of up to limit occurrences a claim under le may
	// take (Claimable), oldest first. It locks nothing: Claim decides.
	Candidates string
	// Claim: (holder, le, job_id, scheduled_for, lock_epoch). Takes the
	// occurrence if its lock epoch is still lock_epoch and it is still
	// claimable, in one conditional statement: locked_by = holder,
	// locked_at = now, lock_epoch + 1, lock_lease_epoch = le. Claimable
	// means: its job is not paused, and it is unlocked with not_before
	// passed (or none), or its lock is stale (locked_at + the job's
	// lock_timeout < now), or it was taken under a worker lease (negative
	// lock_lease_epoch) that is missing or expired at now, or le is a
	// leader's (> 0) and it was taken under an older leader's term (0 <
	// lock_lease_epoch < le). Rows affected.
	Claim string
	// Read: (job_id, scheduled_for). attempt, lock_epoch and now.
	Read string
	// Start: (attempt, lock…). Sets attempt, refreshes locked_at. Rows
	// affected.
	Start string
	// AbandonRunning: (job_id, scheduled_for). Marks the occurrence's runs
	// still 'running' abandoned, as JobQueries.AbandonRunning.
	AbandonRunning string
	// Heartbeat: (lock…). Extends locked_at. Rows affected.
	Heartbeat string
	// Release: (attempt, backoff_ms|NULL, lock…). Unlocks for a retry:
	// attempt, not_before = now + backoff (NULL clears),
	// lock_lease_epoch = 0. Rows affected.
	Release string
	// Delete: (lock…). The occurrence is done. Rows affected.
	Delete string
	// DeleteJob: (job_id). In DeleteJob's transaction.
	DeleteJob string
	// SetBreaker: (breaker_count, open, changed, job_id). JobQueries.SetBreaker
	// without the job lock: an allow run holds its occurrence's, written
	// first in the same transaction.
	SetBreaker string
	// Count: (job_id). The job's occurrences in flight or awaiting a retry.
	Count string
}

// ErrOccurrencesFull is returned by SpawnOccurrence when the job has
// max_concurrent occurrences in flight (or awaiting a retry) already: the
// spawn changed nothing, and the job's lock is still held.
var ErrOccurrencesFull = errors.New("sqlstore: the job has max_concurrent occurrences in flight")

func (s *Store) occq() *OccurrenceQueries { return &s.d.Jobs.Occurrences }

// SpawnOccurrence turns the claim of an allow job (the job lock jl) into a
// claim of one occurrence, at, in one transaction (tx when given: the
// leader's fenced one): it releases the job row at next (its following
// occurrence, zero for none; attempt 0, no backoff), which fails with
// sqlease.ErrLeaseLost unless jl is still held and holds the row until the
// commit, then inserts the occurrence's row locked to jl's holder under
// jl's epoch and le (the stored lease epoch, see OccurrenceQueries) —
// unless maxConcurrent (0: no bound) rows of the job exist, then it
// returns ErrOccurrencesFull and changes nothing. Spawns of one job are
// serialized by its row, so the count cannot be raced past the bound. It
// returns the occurrence's lock: the fence of its runs (StartRun, …).
func (s *Store) SpawnOccurrence(ctx context.Context, tx *sql.Tx, jl Lock, job string, at, next time.Time, le int64, maxConcurrent int) (Lock, error) {
	if s.occq().Insert == "" {
		return Lock{}, fmt.Errorf("%w: dialect %s cannot run overlap allow jobs", sqlease.ErrInvalidConfig, s.d.Name)
	}
	if !jl.Occurrence.IsZero() || at.IsZero() || maxConcurrent < 0 {
		return Lock{}, fmt.Errorf("%w: spawn occurrence of job %d: needs a job lock, an occurrence and max_concurrent >= 0", sqlease.ErrInvalidConfig, jl.JobID)
	}
	err := s.inTx(ctx, tx, func(tx *sql.Tx) error {
		if err := s.lockedExec(ctx, tx, s.q().ReleaseJob, jl, s.timeArg(next), 0, nil); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, s.occq().Insert, jl.JobID, job, s.timeArg(at), jl.Holder, jl.Epoch, le, maxConcurrent)
		if err != nil {
			if s.d.IsUniqueViolation != nil && s.d.IsUniqueViolation(err) {
				return fmt.Errorf("%w: occurrence %s is in flight already", sqlease.ErrConflict, at.UTC().Format(time.RFC3339Nano))
			}
			return s.classify(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return s.classify(err)
		} else if n == 0 {
			return ErrOccurrencesFull
		}
		return nil
	})
	if err != nil {
		return Lock{}, fmt.Errorf("spawn occurrence of job %q at %s: %w", job, at.UTC().Format(time.RFC3339Nano), err)
	}
	return Lock{JobID: jl.JobID, Holder: jl.Holder, Epoch: jl.Epoch, Occurrence: at}, nil
}

// ClaimOccurrences takes up to limit occurrences of allow jobs that need
// an owner — awaiting a retry whose backoff has passed, or held by a lock
// gone stale, by a worker whose lease is gone, or (le > 0) by an older
// leader's term — for holder under the stored lease epoch le (see
// OccurrenceQueries), in tx when given. Each is returned as a Claimed of
// its job whose NextRunAt is the occurrence, Attempt the attempts started
// for it, and Lock the occurrence's new lock. A job row that cannot be
// decoded leaves its occurrence claimed until its lock goes stale.
func (s *Store) ClaimOccurrences(ctx context.Context, tx *sql.Tx, holder string, le int64, limit int) ([]Claimed, error) {
	if s.occq().Candidates == "" || limit <= 0 {
		return nil, nil
	}
	sent := time.Now()
	type cand struct {
		jobID  int64
		name   string
		at     time.Time
		epoch  int64
		locked bool
	}
	var cands []cand
	rows, err := s.on(tx).QueryContext(ctx, s.occq().Candidates, le, limit)
	_, err = scanRows(rows, err, func(sc scanner) error {
		var c cand
		var at dbTime
		if err := sc.Scan(&c.jobID, &c.name, &at, &c.epoch, &c.locked); err != nil {
			return err
		}
		c.at = at.T
		cands = append(cands, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim occurrences: %w", s.classify(err))
	}
	var out []Claimed
	for _, c := range cands {
		var attempt int
		var epoch int64
		var now dbTime
		claimed := false
		err := s.inTx(ctx, tx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, s.occq().Claim, holder, le, c.jobID, s.timeArg(c.at), c.epoch)
			if err != nil {
				return s.classify(err)
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return s.classify(err) // taken by another, or no longer claimable
			}
			claimed = true
			return s.classify(tx.QueryRowContext(ctx, s.occq().Read, c.jobID, s.timeArg(c.at)).Scan(&attempt, &epoch, &now))
		})
		if err != nil {
			return out, fmt.Errorf("claim occurrence of job %d at %s: %w", c.jobID, c.at.UTC().Format(time.RFC3339Nano), err)
		}
		if !claimed {
			continue
		}
		j, err := s.jobIn(ctx, tx, returning{query: s.q().JobByName, args: []any{c.name}})
		if err != nil || j.ID != c.jobID {
			// Deleted meanwhile (its occurrences went with it), or a row
			// that cannot be decoded: its lock goes stale.
			continue
		}
		j.NextRunAt, j.Attempt, j.LockedBy, j.LockEpoch = c.at, attempt, holder, epoch
		out = append(out, Claimed{StoredJob: j, Lock: Lock{JobID: c.jobID, Holder: holder, Epoch: epoch, Occurrence: c.at},
			Now: now.T, Reclaimed: c.locked, SentAt: sent})
	}
	return out, nil
}

// occExec runs an occurrence statement whose last four arguments are the
// lock and turns "no row affected" into sqlease.ErrLeaseLost.
func (s *Store) occExec(ctx context.Context, q Querier, query string, l Lock, args ...any) error {
	n, err := s.affected(q.ExecContext(ctx, query, append(args, l.JobID, s.timeArg(l.Occurrence), l.Holder, l.Epoch)...))
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("occurrence lock %d/%s/%s@%d: %w", l.JobID, l.Occurrence.UTC().Format(time.RFC3339Nano), l.Holder, l.Epoch, sqlease.ErrLeaseLost)
	}
	return nil
}

// fenceWrite is the lock's own conditional write that heads every fenced
// write of a run (a checkpoint, a breaker, a skip): the job row's
// heartbeat, or the occurrence row's.
func (s *Store) fenceWrite(ctx context.Context, q Querier, l Lock) error {
	if !l.Occurrence.IsZero() {
		return s.occExec(ctx, q, s.occq().Heartbeat, l)
	}
	return s.lockedExec(ctx, q, s.q().Heartbeat, l)
}

// startOccurrenceRun is StartRun under an occurrence lock.
func (s *Store) startOccurrenceRun(ctx context.Context, tx *sql.Tx, l Lock, run sqlease.Run, conflict func(error) error) error {
	if !run.ScheduledFor.Equal(l.Occurrence) {
		return fmt.Errorf("%w: a run of %s under the lock of occurrence %s", sqlease.ErrInvalidConfig, run.IdempotencyKey(), l.Occurrence.UTC().Format(time.RFC3339Nano))
	}
	return s.inTx(ctx, tx, func(tx *sql.Tx) error {
		if err := s.occExec(ctx, tx, s.occq().Start, l, run.Attempt); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.occq().AbandonRunning, l.JobID, s.timeArg(l.Occurrence)); err != nil {
			return s.classify(err)
		}
		if _, err := tx.ExecContext(ctx, s.q().InsertRun, l.JobID, run.Job, s.timeArg(run.ScheduledFor), run.Attempt, l.Holder, run.Epoch); err != nil {
			return conflict(err)
		}
		return nil
	})
}

// endOccurrence is the occurrence row's part of a finish or a release
// (f.Next and f.Attempt as Finish documents): next at the occurrence itself
// is a retry, which unlocks it with the attempt count and backoff (a start
// that failed gives it back so, with the count it had); anything else means
// the occurrence is done, and deletes it.
func (s *Store) endOccurrence(ctx context.Context, tx *sql.Tx, l Lock, next time.Time, attempt int, backoffMs any) error {
	if next.Equal(l.Occurrence) {
		return s.occExec(ctx, tx, s.occq().Release, l, attempt, backoffMs)
	}
	return s.occExec(ctx, tx, s.occq().Delete, l)
}

// finishOccurrenceRun is FinishRun under an occurrence lock.
func (s *Store) finishOccurrenceRun(ctx context.Context, tx *sql.Tx, l Lock, run sqlease.Run, f Finish, b *BreakerUpdate) error {
	errText, backoff := finishArgs(f)
	return s.inTx(ctx, tx, func(tx *sql.Tx) error {
		if err := s.endOccurrence(ctx, tx, l, f.Next, f.Attempt, backoff); err != nil {
			return err
		}
		if b != nil {
			if _, err := tx.ExecContext(ctx, s.occq().SetBreaker, b.Failures, boolInt(b.Open), boolInt(b.Changed), l.JobID); err != nil {
				return s.classify(err)
			}
		}
		if _, err := tx.ExecContext(ctx, s.q().FinishRun, string(f.Outcome), errText, l.JobID, s.timeArg(run.ScheduledFor), run.Attempt); err != nil {
			return s.classify(err)
		}
		return s.insertOutput(ctx, tx, l.JobID, run, f.Output)
	})
}

// releaseOccurrence is releaseUnrun under an occurrence lock: its runs
// still marked running are abandoned; it is retried later (next is the
// occurrence itself and attempt > 0) or done.
func (s *Store) releaseOccurrence(ctx context.Context, tx *sql.Tx, l Lock, next time.Time, attempt int, backoffMs any) error {
	return s.inTx(ctx, tx, func(tx *sql.Tx) error {
		if err := s.endOccurrence(ctx, tx, l, next, attempt, backoffMs); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.occq().AbandonRunning, l.JobID, s.timeArg(l.Occurrence)); err != nil {
			return s.classify(err)
		}
		return nil
	})
}

// Occurrences counts the job's occurrences in flight or awaiting a retry
// (overlap allow); 0 where the dialect has none.
func (s *Store) Occurrences(ctx context.Context, jobID int64) (int, error) {
	if s.occq().Count == "" {
		return 0, nil
	}
	var n int
	if err := s.db.QueryRowContext(ctx, s.occq().Count, jobID).Scan(&n); err != nil {
		return 0, fmt.Errorf("count occurrences of job %d: %w", jobID, s.classify(err))
	}
	return n, nil
}

// GiveBack is ReleaseUnrun with the job (or occurrence) not due again for
// wait (not_before = now + wait): an overlap allow job whose occurrences
// are at their bound gives its claim back so.
func (s *Store) GiveBack(ctx context.Context, tx *sql.Tx, l Lock, next time.Time, attempt int, wait time.Duration) error {
	if err := s.releaseUnrun(ctx, tx, l, next, attempt, wait.Milliseconds()); err != nil {
		return fmt.Errorf("give back job %d: %w", l.JobID, err)
	}
	return nil
}

// OccurrencesWaiting reports whether any occurrence of an overlap allow job
// is claimable under the stored lease epoch le (see ClaimOccurrences), by
// one unlocked read: a leader asks before it claims them in a fenced
// transaction.
func (s *Store) OccurrencesWaiting(ctx context.Context, le int64) (bool, error) {
	if s.occq().Candidates == "" {
		return false, nil
	}
	rows, err := s.db.QueryContext(ctx, s.occq().Candidates, le, 1)
	n, err := scanRows(rows, err, func(scanner) error { return nil })
	if err != nil {
		return false, fmt.Errorf("occurrences waiting: %w", s.classify(err))
	}
	return n > 0, nil
}
