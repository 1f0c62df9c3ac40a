package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sqlease/sqlease"
)

// Batched reports whether the dialect can start and finish many runs at
// once: in one statement (JobQueries.StartRuns and FinishRuns), or in one
// transaction of single-row statements (StartRunIf). Claim and leader mode
// then cost a few statements or transactions per claimed batch instead of
// two transactions per run.
func (s *Store) Batched() bool {
	q := s.q()
	claimJobs := q.ClaimJobs != "" || q.ClaimLockJobs != "" && q.ClaimIDsWR.Write != ""
	return claimJobs && (q.StartRuns != "" && q.FinishRuns != "" || q.StartRunIf != "")
}

// idsArg is a list of job ids as the driver takes it (Dialect.IDs).
func (s *Store) idsArg(ids []int64) any {
	if s.d.IDs != nil {
		return s.d.IDs(ids)
	}
	return ids
}

// ClaimJobs is ClaimJob for several jobs in one statement, inside the
// leader's fenced transaction tx; a job locked by another transaction at
// that moment is left out, as is one that is not claimable. Only where
// Batched.
func (s *Store) ClaimJobs(ctx context.Context, tx *sql.Tx, ids []int64, tok sqlease.Token) ([]Claimed, error) {
	c := make([]Claimed, 0, len(ids))
	var bad []CorruptClaim
	if s.q().ClaimJobs == "" {
		if len(ids) == 0 {
			return c, nil
		}
		list, args := idList(slices.Sorted(slices.Values(ids)))
		args = append(args, tok.Epoch, tok.Epoch, tok.Holder)
		locked, reclaimed, err := s.scanLocked(tx.QueryContext(ctx, strings.Replace(s.q().ClaimLockJobs, "{ids}", list, 1), args...))
		if err == nil && len(locked) > 0 {
			err = s.claimIDs(ctx, tx, locked, reclaimed, tok.Holder, tok.Epoch, &c, &bad)
		}
		if err != nil {
			return nil, fmt.Errorf("claim %d jobs: %w", len(ids), err)
		}
		return c, corruptClaims(bad)
	}
	rows, err := tx.QueryContext(ctx, s.q().ClaimJobs, s.idsArg(ids), tok.Holder, tok.Epoch)
	if _, err := scanRows(rows, err, scanClaim(&c, &bad, true)); err != nil {
		return nil, fmt.Errorf("claim %d jobs: %w", len(ids), s.classify(err))
	}
	return c, corruptClaims(bad)
}

// ClaimStartJobs is ClaimJobs that also starts, in the same statement, the
// runs of one-off jobs that need no decision of the missed-runs policy, with
// tok's epoch as the run's epoch (see JobQueries.ClaimStartJobs); their
// Claimed.Started is set. Without that statement it is ClaimJobs.
func (s *Store) ClaimStartJobs(ctx context.Context, tx *sql.Tx, ids []int64, tok sqlease.Token) ([]Claimed, error) {
	if s.q().ClaimStartJobs == "" {
		return s.ClaimJobs(ctx, tx, ids, tok)
	}
	out := make([]Claimed, 0, len(ids))
	var bad []CorruptClaim
	rows, err := tx.QueryContext(ctx, s.q().ClaimStartJobs, s.idsArg(ids), tok.Holder, tok.Epoch)
	if err := scanClaimStarts(rows, err, &out, &bad, tok.Epoch); err != nil {
		return nil, fmt.Errorf("claim %d jobs: %w", len(ids), s.classify(err))
	}
	return out, corruptClaims(bad)
}

// ClaimStartJobsFenced is ClaimStartJobs fenced by tok in its one
// statement, outside any transaction (see FinishRunsFenced). When the fence
// fails it claims nothing and returns no claim, as when no job is
// claimable: a caller that gets none learns which by claiming in Fenced.
// Only where SelfFenced.
func (s *Store) ClaimStartJobsFenced(ctx context.Context, tok sqlease.Token, ids []int64) ([]Claimed, error) {
	if err := validateToken(tok); err != nil {
		return nil, err
	}
	if s.q().ClaimStartJobsFenced == "" {
		return nil, fmt.Errorf("%w: claim jobs fenced by statement: not where the dialect has no ClaimStartJobsFenced", sqlease.ErrInvalidConfig)
	}
	out := make([]Claimed, 0, len(ids))
	var bad []CorruptClaim
	rows, err := s.db.QueryContext(ctx, s.q().ClaimStartJobsFenced, s.idsArg(ids), tok.Holder, tok.Epoch, tok.Name)
	if err := scanClaimStarts(rows, err, &out, &bad, tok.Epoch); err != nil {
		return nil, fmt.Errorf("claim %d jobs: %w", len(ids), s.classify(err))
	}
	return out, corruptClaims(bad)
}

// scanClaimStarts appends the rows of ClaimStart or ClaimStartJobs to out,
// or to bad (see scanClaim); the runs started have runEpoch as their epoch,
// or the new lock epoch when it is 0, and start at the claim's now, or at
// their occurrence when it is later (ClaimStartJobsAheadFenced).
func scanClaimStarts(rows *sql.Rows, err error, out *[]Claimed, bad *[]CorruptClaim, runEpoch int64) error {
	var now dbTime
	var reclaimed, oneOffDue, started bool
	var attempt int
	js := newClaimScan(&now, &reclaimed, &attempt, &oneOffDue, &started)
	_, err = scanRows(rows, err, func(sc scanner) error {
		j, err := js.scan(sc)
		c := Claimed{StoredJob: j, Lock: Lock{JobID: j.ID, Holder: j.LockedBy, Epoch: j.LockEpoch}, Now: now.T, Reclaimed: reclaimed}
		if started {
			epoch := runEpoch
			if epoch == 0 {
				epoch = j.LockEpoch
			}
			c.Started = &sqlease.Run{JobID: j.ID, Job: j.Name, ScheduledFor: j.NextRunAt, Attempt: attempt,
				Holder: j.LockedBy, Epoch: epoch, Outcome: sqlease.OutcomeRunning, StartedAt: later(now.T, j.NextRunAt)}
		}
		return keepClaim(out, bad, c, err)
	})
	return err
}

// ClaimAndStart is ClaimDue that also starts, in the same statement, the
// runs of one-off jobs that need no decision of the missed-runs policy (see
// JobQueries.ClaimStart); their Claimed.Started is set. Where the dialect
// can, it takes only due jobs after the cursor after (the zero cursor: from
// the start). Without ClaimStart it is ClaimDue, from the start.
func (s *Store) ClaimAndStart(ctx context.Context, holder string, limit int, after ClaimCursor) ([]Claimed, error) {
	return s.claimAndStart(ctx, holder, 0, limit, after)
}

// ClaimAndStartUnder is ClaimAndStart under a worker lease, as
// ClaimDueUnder.
func (s *Store) ClaimAndStartUnder(ctx context.Context, tok sqlease.Token, limit int, after ClaimCursor) ([]Claimed, error) {
	if s.q().ClaimStart == "" {
		return s.ClaimDueUnder(ctx, tok, limit)
	}
	if tok.Name != WorkerLeasePrefix+tok.Holder || tok.Epoch <= 0 {
		return nil, fmt.Errorf("%w: claim under %s@%d: not a worker lease (%s<holder>)", sqlease.ErrInvalidConfig, tok.Name, tok.Epoch, WorkerLeasePrefix)
	}
	return s.claimAndStart(ctx, tok.Holder, tok.Epoch, limit, after)
}

func (s *Store) claimAndStart(ctx context.Context, holder string, workerEpoch int64, limit int, after ClaimCursor) ([]Claimed, error) {
	return s.claimAndStartNext(ctx, holder, workerEpoch, limit, after, nil)
}

// claimAndStartNext is claimAndStart that, with next, also learns when the
// next job falls due where the dialect's claim can tell (ClaimPeek).
func (s *Store) claimAndStartNext(ctx context.Context, holder string, workerEpoch int64, limit int, after ClaimCursor, next *claimNext) ([]Claimed, error) {
	if s.q().ClaimStart == "" {
		return s.claimDueNext(ctx, holder, workerEpoch, limit, next)
	}
	out := make([]Claimed, 0, limit)
	var bad []CorruptClaim
	sent := time.Now()
	var rows *sql.Rows
	var err error
	if after.IsZero() || s.q().ClaimStartAfter == "" {
		rows, err = s.db.QueryContext(ctx, s.q().ClaimStart, holder, limit, workerEpoch)
	} else {
		rows, err = s.db.QueryContext(ctx, s.q().ClaimStartAfter, holder, limit, workerEpoch, after.NextRunAt.UTC(), after.ID)
	}
	if err := scanClaimStarts(rows, err, &out, &bad, 0); err != nil {
		return nil, fmt.Errorf("claim due jobs: %w", s.classify(err))
	}
	return sentAt(out, sent), corruptClaims(bad)
}

// ClaimsFromCursor reports whether ClaimAndStart and ClaimAndStartUnder
// honour their cursor; elsewhere every claim starts from the start.
func (s *Store) ClaimsFromCursor() bool { return s.q().ClaimStartAfter != "" }

// ClaimCursor is a place in the order claims take due jobs in, (next_run_at,
// id): a claim from it takes only jobs after it. A worker with runs in
// flight claims from where its last claim ended, so that it does not read
// its own claimed jobs again (they stay in the due index until they finish:
// a claim writes no indexed column). The zero cursor is the start.
type ClaimCursor struct {
	NextRunAt time.Time
	ID        int64
}

// IsZero reports whether c is the start.
func (c ClaimCursor) IsZero() bool { return c.NextRunAt.IsZero() && c.ID == 0 }

// Past returns the cursor after c and every job in claimed.
func (c ClaimCursor) Past(claimed []Claimed) ClaimCursor {
	for _, j := range claimed {
		if at := j.NextRunAt; at.After(c.NextRunAt) || at.Equal(c.NextRunAt) && j.ID > c.ID {
			c = ClaimCursor{NextRunAt: at, ID: j.ID}
		}
	}
	return c
}

// StartReq is one run of a batch start: attempt Attempt of the occurrence
// the claimed job's next_run_at points at.
type StartReq struct {
	Lock         Lock
	Job          string
	ScheduledFor time.Time
	Attempt      int
	// RunEpoch is the run's fencing epoch: the lease epoch in leader mode;
	// 0 means the lock epoch (claim mode).
	RunEpoch int64
}

// StartRuns appends a run for each request whose lock is still held and
// whose attempt is not already in the ledger, in one statement; the run's
// epoch is its lock epoch (claim mode). It is StartRun for the common case
// only: the occurrence must be the job's next_run_at (the missed-runs policy
// did not move on) and the job must not be a reclaimed stale lock (whose
// crashed run StartRun marks abandoned). started[i] tells whether reqs[i]
// started; a request that did not gets no run and leaves the job untouched,
// and the caller may retry it through StartRun to learn why. Pass tx to run
// inside an existing (fenced) transaction.
func (s *Store) StartRuns(ctx context.Context, tx *sql.Tx, reqs []StartReq) (started []bool, err error) {
	return s.startRuns(ctx, tx, nil, reqs)
}

// startRuns is StartRuns, with StartRunsFenced's statement when fence is
// not nil.
func (s *Store) startRuns(ctx context.Context, tx *sql.Tx, fence *sqlease.Token, reqs []StartReq) (started []bool, err error) {
	n := len(reqs)
	started = make([]bool, n)
	if n == 0 {
		return started, nil
	}
	if s.q().StartRuns == "" {
		return s.startRunsByRow(ctx, tx, reqs)
	}
	ids, epochs, sfs := make([]int64, n), make([]int64, n), make([]time.Time, n)
	attempts, names, holders, runEpochs := make([]int32, n), make([]string, n), make([]string, n), make([]int64, n)
	at := make(map[int64]int, n)
	for i, r := range reqs {
		ids[i], epochs[i], sfs[i] = r.Lock.JobID, r.Lock.Epoch, r.ScheduledFor.UTC()
		attempts[i], names[i], holders[i], runEpochs[i] = int32(r.Attempt), r.Job, r.Lock.Holder, r.RunEpoch
		if r.RunEpoch == 0 {
			runEpochs[i] = r.Lock.Epoch
		}
		at[r.Lock.JobID] = i
	}
	args := []any{ids, epochs, sfs, attempts, names, holders, runEpochs}
	query, q := s.q().StartRuns, s.on(tx)
	if fence != nil {
		query, q = s.q().StartRunsFenced, s.db
		args = append(args, fence.Name, fence.Holder, fence.Epoch)
	}
	rows, err := q.QueryContext(ctx, query, args...)
	if err := markIDs(rows, err, at, started); err != nil {
		return nil, fmt.Errorf("start %d runs: %w", n, s.classify(err))
	}
	return started, nil
}

// FinishReq is one run of a batch finish.
type FinishReq struct {
	Lock   Lock
	Run    sqlease.Run
	Finish Finish
}

// FinishRuns is FinishRun for many runs in one statement: each request
// records its run's outcome and releases its job, atomically and only while
// its lock is held. done[i] is false when reqs[i]'s lock was lost; nothing
// of it was written then. Pass tx to run inside an existing (fenced)
// transaction.
func (s *Store) FinishRuns(ctx context.Context, tx *sql.Tx, reqs []FinishReq) (done []bool, err error) {
	return s.finishRuns(ctx, tx, nil, reqs)
}

// SelfFenced reports whether ClaimStartJobsFenced and FinishRunsFenced
// fence by themselves, in one statement each, the leases of ls: whether the
// dialect has those statements and ls is this store (through wrappers that
// say what they wrap by a method Unwrap() sqlease.LeaseStore), or another
// on the same pool and lease table.
func (s *Store) SelfFenced(ls sqlease.LeaseStore) bool {
	if s.q().ClaimStartJobsFenced == "" || s.q().FinishRunsFenced == "" {
		return false
	}
	for ls != nil {
		if o, ok := ls.(*Store); ok {
			return o == s || o.db == s.db && o.d.Queries.FenceLock == s.d.Queries.FenceLock
		}
		u, ok := ls.(interface{ Unwrap() sqlease.LeaseStore })
		if !ok {
			return false
		}
		ls = u.Unwrap()
	}
	return false
}

// FinishRunsFenced is FinishRuns fenced by tok in its one statement, outside
// any transaction: where SelfFenced, a leader's finish costs one round trip
// instead of a fenced transaction's five. When the fence fails nothing is
// written and every done[i] is false, as when every lock is lost: a caller
// that gets no run done learns which by running FinishRuns in Fenced (the
// statement wrote nothing, so it may). Only where SelfFenced.
func (s *Store) FinishRunsFenced(ctx context.Context, tok sqlease.Token, reqs []FinishReq) (done []bool, err error) {
	if err := validateToken(tok); err != nil {
		return nil, err
	}
	return s.finishRuns(ctx, nil, &tok, reqs)
}

// finishRuns is FinishRuns, with FinishRunsFenced's statement when fence is
// not nil.
func (s *Store) finishRuns(ctx context.Context, tx *sql.Tx, fence *sqlease.Token, reqs []FinishReq) (done []bool, err error) {
	n := len(reqs)
	done = make([]bool, n)
	if n == 0 {
		return done, nil
	}
	// One lock order for every statement that updates several jobs: two
	// concurrent batches then wait for each other instead of deadlocking.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(reqs[a].Lock.JobID, reqs[b].Lock.JobID) })
	if fence != nil && s.q().FinishRunsFenced == "" {
		return nil, fmt.Errorf("%w: finish runs fenced by statement: not where the dialect has no FinishRunsFenced", sqlease.ErrInvalidConfig)
	}
	if s.q().FinishRuns == "" {
		// A single run costs two statements by row, one fewer than by JSON.
		if n > 1 && s.q().FinishRunsJSON.Lock != "" {
			return s.finishRunsJSON(ctx, tx, reqs, order)
		}
		return s.finishRunsByRow(ctx, tx, reqs, order)
	}
	ids, epochs, holders := make([]int64, n), make([]int64, n), make([]string, n)
	nexts, nextAttempts, backoffs := make([]*time.Time, n), make([]int32, n), make([]*int64, n)
	outcomes, errs, sfs, runAttempts := make([]string, n), make([]*string, n), make([]time.Time, n), make([]int32, n)
	outs := make([]*string, n)
	at := make(map[int64]int, n)
	for k, i := range order {
		r := reqs[i]
		ids[k], epochs[k], holders[k] = r.Lock.JobID, r.Lock.Epoch, r.Lock.Holder
		if !r.Finish.Next.IsZero() {
			t := r.Finish.Next.UTC()
			nexts[k] = &t
		}
		nextAttempts[k] = int32(r.Finish.Attempt)
		if r.Finish.Backoff > 0 {
			ms := r.Finish.Backoff.Milliseconds()
			backoffs[k] = &ms
		}
		outcomes[k] = string(r.Finish.Outcome)
		if r.Finish.Error != "" {
			e := CleanText(r.Finish.Error)
			errs[k] = &e
		}
		sfs[k], runAttempts[k] = r.Run.ScheduledFor.UTC(), int32(r.Run.Attempt)
		if r.Finish.Output != "" && s.oq().Insert != "" {
			o := CleanOutput(r.Finish.Output)
			outs[k] = &o
		}
		at[r.Lock.JobID] = i
	}
	// The outputs are kept by the same statement, for the runs it finishes
	// only: a run whose lock is lost keeps none.
	args := []any{ids, epochs, holders, nexts, nextAttempts, backoffs, outcomes, errs, sfs, runAttempts, outs}
	query, q := s.q().FinishRuns, s.on(tx)
	if fence != nil {
		query, q = s.q().FinishRunsFenced, s.db
		args = append(args, fence.Name, fence.Holder, fence.Epoch)
	}
	rows, err := q.QueryContext(ctx, query, args...)
	if err = markIDs(rows, err, at, done); err != nil {
		err = s.classify(err)
		clear(done)
		return nil, fmt.Errorf("finish %d runs: %w", n, err)
	}
	return done, nil
}

// startRunsByRow is StartRuns with one StartRunIf per request, in one
// transaction.
func (s *Store) startRunsByRow(ctx context.Context, tx *sql.Tx, reqs []StartReq) ([]bool, error) {
	started := make([]bool, len(reqs))
	err := s.inTx(ctx, tx, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, s.q().StartRunIf)
		if err != nil {
			return s.classify(err)
		}
		defer st.Close()
		for i, r := range reqs {
			epoch := r.RunEpoch
			if epoch == 0 {
				epoch = r.Lock.Epoch
			}
			res, err := st.ExecContext(ctx, r.Lock.JobID, r.Lock.Holder, r.Lock.Epoch, r.Job, s.timeArg(r.ScheduledFor), r.Attempt, epoch)
			if err != nil {
				return s.classify(err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return s.classify(err)
			}
			started[i] = n > 0
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("start %d runs: %w", len(reqs), err)
	}
	return started, nil
}

// finishRunsByRow is FinishRuns with FinishRun's statements per request, in
// one transaction, in the order given (job id: the lock order).
func (s *Store) finishRunsByRow(ctx context.Context, tx *sql.Tx, reqs []FinishReq, order []int) ([]bool, error) {
	done := make([]bool, len(reqs))
	err := s.inTx(ctx, tx, func(tx *sql.Tx) error {
		release, err := tx.PrepareContext(ctx, s.q().ReleaseJob)
		if err != nil {
			return s.classify(err)
		}
		defer release.Close()
		finish, err := tx.PrepareContext(ctx, s.q().FinishRun)
		if err != nil {
			return s.classify(err)
		}
		defer finish.Close()
		// Prepared once for the batch too: compiling it for each run was
		// most of SQLite's statement compiling in a daemon delivering HTTP
		// actions (each keeps its status line).
		var keep *sql.Stmt
		if s.hasOutput(reqs) {
			if keep, err = tx.PrepareContext(ctx, s.oq().Insert); err != nil {
				return s.classify(err)
			}
			defer keep.Close()
		}
		for _, i := range order {
			r := reqs[i]
			errText, backoff := finishArgs(r.Finish)
			res, err := release.ExecContext(ctx, s.timeArg(r.Finish.Next), r.Finish.Attempt, backoff, r.Lock.JobID, r.Lock.Holder, r.Lock.Epoch)
			if err != nil {
				return s.classify(err)
			}
			if n, err := res.RowsAffected(); err != nil {
				return s.classify(err)
			} else if n == 0 {
				continue // the lock is lost: nothing of this run is written
			}
			if _, err := finish.ExecContext(ctx, string(r.Finish.Outcome), errText, r.Lock.JobID, s.timeArg(r.Run.ScheduledFor), r.Run.Attempt); err != nil {
				return s.classify(err)
			}
			if args := s.outputArgs(r.Lock.JobID, r.Run, r.Finish.Output); args != nil {
				if _, err := keep.ExecContext(ctx, args...); err != nil {
					return fmt.Errorf("keep output: %w", s.classify(err))
				}
			}
			done[i] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("finish %d runs: %w", len(reqs), err)
	}
	return done, nil
}

// FinishJSON are the statements of a batch finish for a dialect without
// array parameters but with JSON_TABLE (MySQL, MariaDB), run in this order
// in one transaction. Each takes its requests as one JSON array (an
// argument holds at most maxJSONArg bytes; a larger group takes several
// executions), so that a group of runs costs three or four statements
// instead of three per run: on MariaDB most of the server's time went to
// executing statements, not to the rows they wrote. In the arrays, times
// are strings 'YYYY-MM-DD hh:mm:ss.ffffff' in UTC, and a member that would
// be NULL is left out.
type FinishJSON struct {
	// Lock: ([{i, id, holder, epoch}…] ordered by id). Locks (FOR UPDATE),
	// in the array's order, the jobs still locked by (holder, epoch), and
	// returns i of each.
	Lock string
	// Release: ([{id, next, attempt, backoff}…]). ReleaseJob of each job,
	// which Lock locked: (next_run_at, attempt, backoff_ms).
	Release string
	// Finish: ([{id, sf, attempt, outcome, error}…]). FinishRun of each run:
	// (job_id, scheduled_for, attempt) and its outcome and error.
	Finish string
	// Output: ([{id, sf, attempt, output}…]). Output.Insert of each output;
	// empty where the dialect keeps none.
	Output string
}

// maxJSONArg bounds the JSON arrays finishRunsJSON passes, well below the
// servers' max_allowed_packet (16 MiB on MariaDB, 64 MiB on MySQL).
const maxJSONArg = 1 << 20

// jsonTime is a time as FinishJSON's arrays hold it; "" (left out) for the
// zero time, which the other paths pass as NULL.
func jsonTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Truncate(time.Microsecond).Format("2006-01-02 15:04:05.000000")
}

// finishRunsJSON is FinishRuns with JobQueries.FinishRunsJSON: it locks the
// jobs whose locks the requests still hold, in the lock order, then
// releases them, finishes their runs and keeps their outputs, a statement
// each. Once locked the jobs cannot change, so the later statements need
// neither the lock's condition nor an order.
func (s *Store) finishRunsJSON(ctx context.Context, tx *sql.Tx, reqs []FinishReq, order []int) ([]bool, error) {
	q := &s.q().FinishRunsJSON
	type lockArg struct {
		I      int    `json:"i"`
		ID     int64  `json:"id"`
		Holder string `json:"holder"`
		Epoch  int64  `json:"epoch"`
	}
	type releaseArg struct {
		ID      int64  `json:"id"`
		Next    string `json:"next,omitempty"`
		Attempt int    `json:"attempt"`
		Backoff *int64 `json:"backoff,omitempty"`
	}
	type finishArg struct {
		ID      int64  `json:"id"`
		SF      string `json:"sf,omitempty"`
		Attempt int    `json:"attempt"`
		Outcome string `json:"outcome"`
		Error   string `json:"error,omitempty"`
	}
	type outputArg struct {
		ID      int64  `json:"id"`
		SF      string `json:"sf,omitempty"`
		Attempt int    `json:"attempt"`
		Output  string `json:"output"`
	}
	locks := make([]lockArg, len(order))
	for k, i := range order {
		l := reqs[i].Lock
		locks[k] = lockArg{I: i, ID: l.JobID, Holder: l.Holder, Epoch: l.Epoch}
	}
	held := make([]bool, len(reqs))
	done := make([]bool, len(reqs))
	err := s.inTx(ctx, tx, func(tx *sql.Tx) error {
		err := execJSON(locks, func(arg string) error {
			rows, err := tx.QueryContext(ctx, q.Lock, arg)
			_, err = scanRows(rows, err, func(sc scanner) error {
				var i int
				if err := sc.Scan(&i); err != nil {
					return err
				}
				if i < 0 || i >= len(held) {
					return fmt.Errorf("lock returned request %d of %d", i, len(held))
				}
				held[i] = true
				return nil
			})
			return err
		})
		if err != nil {
			return s.classify(err)
		}
		var releases []releaseArg
		var finishes []finishArg
		var outputs []outputArg
		var byRow [][]any // outputs kept by Output.Insert
		lastID, released := int64(0), false
		for _, i := range order {
			r := reqs[i]
			// Of two requests for one job (next to each other in order),
			// only the first releases it: by row, the second then finds
			// it unlocked.
			if !held[i] || released && r.Lock.JobID == lastID {
				continue
			}
			lastID, released = r.Lock.JobID, true
			done[i] = true
			rel := releaseArg{ID: r.Lock.JobID, Next: jsonTime(r.Finish.Next), Attempt: r.Finish.Attempt}
			if r.Finish.Backoff > 0 {
				ms := r.Finish.Backoff.Milliseconds()
				rel.Backoff = &ms
			}
			releases = append(releases, rel)
			fin := finishArg{ID: r.Lock.JobID, SF: jsonTime(r.Run.ScheduledFor), Attempt: r.Run.Attempt, Outcome: string(r.Finish.Outcome)}
			if r.Finish.Error != "" {
				fin.Error = CleanText(r.Finish.Error)
			}
			finishes = append(finishes, fin)
			if r.Finish.Output == "" || s.oq().Insert == "" {
				continue
			}
			// Escaped as JSON, an output may grow sixfold: a long one is
			// kept by row, as an argument of its own.
			if out := CleanOutput(r.Finish.Output); q.Output != "" && len(out) <= maxJSONArg/8 {
				outputs = append(outputs, outputArg{ID: r.Lock.JobID, SF: jsonTime(r.Run.ScheduledFor), Attempt: r.Run.Attempt, Output: out})
			} else {
				byRow = append(byRow, []any{r.Lock.JobID, s.timeArg(r.Run.ScheduledFor), r.Run.Attempt, out})
			}
		}
		exec := func(query string) func(string) error {
			return func(arg string) error {
				_, err := tx.ExecContext(ctx, query, arg)
				return err
			}
		}
		if err := execJSON(releases, exec(q.Release)); err != nil {
			return s.classify(err)
		}
		if err := execJSON(finishes, exec(q.Finish)); err != nil {
			return s.classify(err)
		}
		if err := execJSON(outputs, exec(q.Output)); err != nil {
			return fmt.Errorf("keep output: %w", s.classify(err))
		}
		for _, args := range byRow {
			if _, err := tx.ExecContext(ctx, s.oq().Insert, args...); err != nil {
				return fmt.Errorf("keep output: %w", s.classify(err))
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("finish %d runs: %w", len(reqs), err)
	}
	return done, nil
}

// execJSON calls exec with items as JSON arrays of at most maxJSONArg bytes
// each (an item longer than that alone), in order; with none for no items.
func execJSON[T any](items []T, exec func(arg string) error) error {
	var b []byte
	flush := func() error {
		if len(b) == 0 {
			return nil
		}
		arg := string(append(b, ']'))
		b = b[:0]
		return exec(arg)
	}
	for _, it := range items {
		e, err := json.Marshal(it)
		if err != nil {
			return err
		}
		if len(b) > 0 && len(b)+len(e)+2 > maxJSONArg {
			if err := flush(); err != nil {
				return err
			}
		}
		if len(b) == 0 {
			b = append(b, '[')
		} else {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	return flush()
}

// markIDs sets out[at[id]] for every job id a batch statement returns.
func markIDs(rows *sql.Rows, err error, at map[int64]int, out []bool) error {
	var id int64 // one allocation per statement, not per row
	_, err = scanRows(rows, err, func(sc scanner) error {
		if err := sc.Scan(&id); err != nil {
			return err
		}
		if i, ok := at[id]; ok {
			out[i] = true
		}
		return nil
	})
	return err
}
