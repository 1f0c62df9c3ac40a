package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/sqlease/sqlease"
)

// MaxClaimAhead bounds how far ahead of its due time ClaimStartJobsAheadFenced
// may claim a job. A job claimed ahead is locked, and its run recorded as
// running, before its action starts: a bound of a second keeps that a short
// wait for the leader that claimed it, never a schedule of its own.
const MaxClaimAhead = time.Second

// HasClaimAhead reports whether ClaimStartJobsAheadFenced can be used: the
// dialect has its statement.
func (s *Store) HasClaimAhead() bool {
	return s.q().ClaimStartJobsAheadFenced != "" && s.q().ClaimStartJobsFenced != ""
}

// ClaimStartJobsAheadFenced is ClaimStartJobsFenced that also claims the
// jobs of ids due within ahead of the database's now (and not waiting for a
// retry's backoff): a leader claims the jobs falling due in the next few
// milliseconds in the one statement that claims the one due now, and
// starts each at its own due time. A one-off job's run it starts records
// started_at = the later of the claim's now and the occurrence
// (next_run_at); Claimed.Now is the claim's now, so a caller can tell which
// it claimed ahead (NextRunAt after Now), and must not start their actions
// before NextRunAt - Now has passed since the answer arrived. Only where
// HasClaimAhead; ahead must be within [0, MaxClaimAhead], or
// sqlease.ErrInvalidConfig is returned and nothing claimed.
func (s *Store) ClaimStartJobsAheadFenced(ctx context.Context, tok sqlease.Token, ids []int64, ahead time.Duration) ([]Claimed, error) {
	if err := validateToken(tok); err != nil {
		return nil, err
	}
	if ahead < 0 || ahead > MaxClaimAhead {
		return nil, fmt.Errorf("%w: claim ahead by %s: want 0 to %s", sqlease.ErrInvalidConfig, ahead, MaxClaimAhead)
	}
	if !s.HasClaimAhead() {
		return nil, fmt.Errorf("%w: claim jobs ahead: not where the dialect has no ClaimStartJobsAheadFenced", sqlease.ErrInvalidConfig)
	}
	out := make([]Claimed, 0, len(ids))
	var bad []CorruptClaim
	rows, err := s.db.QueryContext(ctx, s.q().ClaimStartJobsAheadFenced, s.idsArg(ids), tok.Holder, tok.Epoch, tok.Name, ahead.Milliseconds())
	if err := scanClaimStarts(rows, err, &out, &bad, tok.Epoch); err != nil {
		return nil, fmt.Errorf("claim %d jobs ahead: %w", len(ids), s.classify(err))
	}
	return out, corruptClaims(bad)
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// HasClaimStartAhead reports whether ClaimAheadAndStart can be used: the
// dialect has ClaimStartAhead (PostgreSQL; elsewhere claim mode claims
// only what is due).
func (s *Store) HasClaimStartAhead() bool {
	return s.q().ClaimStartAhead != "" && s.q().ClaimStart != ""
}

// DueAfter is what a claim ahead says of the next job to fall due past
// its window.
type DueAfter struct {
	// Known: the claim returned a row, which carries At and Now. A claim
	// that claimed nothing says nothing.
	Known bool
	// At is the first next_run_at of an unpaused job past the window, in
	// database time; zero: none.
	At time.Time
	// Now is the claim's database now, the time At is reckoned from.
	Now time.Time
}

// ClaimAheadAndStart is ClaimAndStart from the start that also claims the
// due jobs within ahead of the database's now (not waiting for a retry's
// backoff): a claim-mode worker claims the jobs falling due in the next few
// milliseconds in the statement that claims the ones due now, and starts
// each at its own due time. As ClaimStartJobsAheadFenced, a one-off job's
// run it starts records started_at = the later of the claim's now and the
// occurrence; a caller must not start an action before NextRunAt - Now has
// passed since the answer arrived. It also returns when the next job falls
// due past the window (see DueAfter). workerEpoch is the worker lease's
// epoch (ClaimAndStartUnder), or 0. Only where HasClaimStartAhead; ahead
// must be within [0, MaxClaimAhead] and limit positive, or
// sqlease.ErrInvalidConfig is returned and nothing claimed.
func (s *Store) ClaimAheadAndStart(ctx context.Context, holder string, workerEpoch int64, limit int, ahead time.Duration) ([]Claimed, DueAfter, error) {
	switch {
	case !s.HasClaimStartAhead():
		return nil, DueAfter{}, fmt.Errorf("%w: claim due jobs ahead: not where the dialect has no ClaimStartAhead", sqlease.ErrInvalidConfig)
	case ahead < 0 || ahead > MaxClaimAhead:
		return nil, DueAfter{}, fmt.Errorf("%w: claim ahead by %s: want 0 to %s", sqlease.ErrInvalidConfig, ahead, MaxClaimAhead)
	case limit <= 0:
		return nil, DueAfter{}, fmt.Errorf("%w: claim ahead: limit %d, want at least 1", sqlease.ErrInvalidConfig, limit)
	case workerEpoch < 0:
		return nil, DueAfter{}, fmt.Errorf("%w: claim ahead: worker epoch %d", sqlease.ErrInvalidConfig, workerEpoch)
	}
	if err := sqlease.ValidateHolderID(holder); err != nil {
		return nil, DueAfter{}, err
	}
	// Not limit's room: a Claimed is large, and a trickle's claim of a
	// few rows allocated (and zeroed) room for a whole batch of 512 — a
	// fifth of the claim's client CPU (-bench trickle, -cpuprofile).
	out := make([]Claimed, 0, min(limit, 16))
	var bad []CorruptClaim
	var next DueAfter
	sent := time.Now()
	rows, err := s.db.QueryContext(ctx, s.q().ClaimStartAhead, holder, limit, workerEpoch, ahead.Milliseconds())
	var now dbTime
	var at nullTime
	var reclaimed, oneOffDue, started bool
	var attempt int
	js := newClaimScan(&now, &reclaimed, &attempt, &oneOffDue, &started, &at)
	_, err = scanRows(rows, err, func(sc scanner) error {
		j, err := js.scan(sc)
		if !now.T.IsZero() {
			next = DueAfter{Known: true, At: at.T, Now: now.T}
		}
		c := Claimed{StoredJob: j, Lock: Lock{JobID: j.ID, Holder: j.LockedBy, Epoch: j.LockEpoch}, Now: now.T, Reclaimed: reclaimed}
		if started {
			c.Started = &sqlease.Run{JobID: j.ID, Job: j.Name, ScheduledFor: j.NextRunAt, Attempt: attempt,
				Holder: j.LockedBy, Epoch: j.LockEpoch, Outcome: sqlease.OutcomeRunning, StartedAt: later(now.T, j.NextRunAt)}
		}
		return keepClaim(&out, &bad, c, err)
	})
	if err != nil {
		return nil, DueAfter{}, fmt.Errorf("claim due jobs ahead: %w", s.classify(err))
	}
	return sentAt(out, sent), next, corruptClaims(bad)
}
