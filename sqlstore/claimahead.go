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
