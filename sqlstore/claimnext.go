package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sqlease/sqlease"
)

// ClaimNext is what a claim learned of when the next job falls due, where
// its dialect tells it in the claim's own statements (JobQueries.ClaimPeek).
type ClaimNext struct {
	// Known says that the claim learned it; without it At means nothing
	// (ask NextDue).
	Known bool
	// At is the local instant (this host's clock) at which the earliest
	// unpaused job still to come at the claim's now falls due, counted from
	// when the answer arrived: late by at most the answer's trip, never
	// early by a clock skew. Zero: none.
	At time.Time
}

// claimNext is ClaimNext with what the caller asked for.
type claimNext struct {
	ClaimNext
	peek bool
}

// ClaimAndStartNext is ClaimAndStart that also reports when the next job
// falls due, where the dialect's claim can say so in its own statements
// (JobQueries.ClaimPeek; elsewhere next.Known is false), so that a worker
// whose claim found nothing — an idle poll — learns the instant of a job
// created meanwhile by another process, and claims it then rather than a
// poll later, without a statement more while idle. peek asks for it where
// it costs a statement on a claim that finds jobs (SQLite: ClaimPeek runs
// before ClaimDue, and replaces it on a claim that finds none); where it
// is free (ClaimPeek replaces ClaimCandidates) it is learnt either way.
// A worker peeks unless its last claim came back full (a backlog, where
// it claims again at once).
func (s *Store) ClaimAndStartNext(ctx context.Context, holder string, limit int, after ClaimCursor, peek bool) ([]Claimed, ClaimNext, error) {
	next := claimNext{peek: peek}
	c, err := s.claimAndStartNext(ctx, holder, 0, limit, after, &next)
	return c, next.ClaimNext, err
}

// ClaimAndStartUnderNext is ClaimAndStartNext under a worker lease, as
// ClaimAndStartUnder.
func (s *Store) ClaimAndStartUnderNext(ctx context.Context, tok sqlease.Token, limit int, after ClaimCursor, peek bool) ([]Claimed, ClaimNext, error) {
	if tok.Name != WorkerLeasePrefix+tok.Holder || tok.Epoch <= 0 {
		return nil, ClaimNext{}, fmt.Errorf("%w: claim under %s@%d: not a worker lease (%s<holder>)", sqlease.ErrInvalidConfig, tok.Name, tok.Epoch, WorkerLeasePrefix)
	}
	next := claimNext{peek: peek}
	c, err := s.claimAndStartNext(ctx, tok.Holder, tok.Epoch, limit, after, &next)
	return c, next.ClaimNext, err
}

// claimPeek runs ClaimPeek: the ids of up to limit claimable jobs and when
// the next job falls due.
func (s *Store) claimPeek(ctx context.Context, limit int) ([]int64, ClaimNext, error) {
	var ids []int64
	var ms sql.NullFloat64
	told := false
	rows, err := s.db.QueryContext(ctx, s.q().ClaimPeek, limit)
	_, err = scanRows(rows, err, func(sc scanner) error {
		var id sql.NullInt64
		var d sql.NullFloat64
		if err := sc.Scan(&id, &d); err != nil {
			return err
		}
		if id.Valid {
			ids = append(ids, id.Int64)
		} else {
			told, ms = true, d
		}
		return nil
	})
	got := time.Now()
	if err != nil {
		return nil, ClaimNext{}, fmt.Errorf("claim peek: %w", s.classify(err))
	}
	if !told {
		return nil, ClaimNext{}, fmt.Errorf("claim peek: no row tells the next due time (JobQueries.ClaimPeek)")
	}
	next := ClaimNext{Known: true}
	if ms.Valid {
		next.At = got.Add(time.Duration(max(ms.Float64, 0) * float64(time.Millisecond)))
	}
	return ids, next, nil
}
