package main

// A PROTOTYPE of the statements this benchmark proposes for claim mode on
// PostgreSQL, driven by the same harness (seeding, counting, exactly-once
// checks, CPU and server statistics) so that the optimization plan rests on
// measurements. It is not the library: it skips the missed-run policy (Plan)
// and retries, which a real implementation keeps by computing them in Go
// between the claim and the start, exactly as today, and passing the results
// in the arrays. Everything else keeps the store's semantics: the claim is
// the dialect's own ClaimDue statement; a start is conditional on the job
// lock (holder, lock_epoch), abandons a crashed predecessor's 'running' run
// and appends the run (unique on job, scheduled_for, attempt); a finish
// releases the lock and records the outcome atomically per job, only while
// the lock is held.
//
//   proto-perjob  1 statement (autocommit) to start and 1 to finish each
//                 run, instead of 5 and 4 round trips in 2 transactions.
//   proto-batch   the claimed batch is started with one statement (arrays),
//                 and finishes are grouped: whatever finished while the
//                 previous finish statement was in flight is written by the
//                 next one (group commit, at most 2 in flight per worker).
//                 ~3 statements per batch instead of ~9 per job.
//
// Both also fix the poll stall: a claim waits PollInterval only when it got
// fewer jobs than it asked for (there are no more due), not whenever it got
// fewer than BatchSize.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

const protoStart = `WITH v AS (
	SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::timestamptz[], $4::int[], $5::text[]) AS v(id, epoch, sf, attempt, name)
), l AS (
	SELECT j.id FROM sqlease_jobs j JOIN v ON j.id = v.id
	WHERE j.locked_by = $6 AND j.lock_epoch = v.epoch
	FOR SHARE OF j
), a AS (
	UPDATE sqlease_runs r SET outcome = 'abandoned', finished_at = clock_timestamp(),
		error = 'the executing instance stopped heartbeating its lock'
	FROM l WHERE r.job_id = l.id AND r.outcome = 'running'
)
INSERT INTO sqlease_runs (job_id, job_name, scheduled_for, attempt, holder_id, epoch, started_at, outcome)
SELECT v.id, v.name, v.sf, v.attempt, $6, v.epoch, clock_timestamp(), 'running' FROM v JOIN l ON l.id = v.id
ON CONFLICT DO NOTHING
RETURNING job_id`

const protoFinish = `WITH v AS (
	SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::timestamptz[], $4::int[], $5::text[], $6::text[],
		$7::timestamptz[], $8::int[], $9::bigint[]) AS v(id, epoch, sf, attempt, outcome, err, next, next_attempt, backoff_ms)
), n AS (SELECT clock_timestamp() AS now),
j AS (
	UPDATE sqlease_jobs j SET locked_by = NULL, locked_at = NULL, lock_lease_epoch = 0,
		next_run_at = v.next, attempt = v.next_attempt, not_before = n.now + v.backoff_ms * interval '1 millisecond',
		last_run_at = n.now, last_modified_at = n.now
	FROM v, n WHERE j.id = v.id AND j.locked_by = $10 AND j.lock_epoch = v.epoch
	RETURNING j.id
)
UPDATE sqlease_runs r SET outcome = v.outcome, error = v.err, finished_at = clock_timestamp()
FROM v JOIN j ON j.id = v.id
WHERE r.job_id = v.id AND r.scheduled_for = v.sf AND r.attempt = v.attempt AND r.outcome = 'running'
RETURNING r.job_id`

// protoRun is a claimed, started run.
type protoRun struct {
	id, epoch int64
	sf        time.Time
	attempt   int
	name      string
}

type protoWorker struct {
	st      *sqlstore.Store
	db      *sql.DB
	holder  string
	batch   int
	maxConc int
	poll    time.Duration
	perJob  bool
	counter *runCounter
	logs    *logCounter
}

func (w *protoWorker) warn(msg string, err error) {
	w.logs.mu.Lock()
	w.logs.counts[msg]++
	if len(w.logs.errs) < 5 {
		w.logs.errs = append(w.logs.errs, msg+": "+err.Error())
	}
	w.logs.mu.Unlock()
}

func (w *protoWorker) start(ctx context.Context, runs []protoRun) (map[int64]bool, error) {
	ids, epochs, sfs, attempts, names := make([]int64, len(runs)), make([]int64, len(runs)), make([]time.Time, len(runs)), make([]int32, len(runs)), make([]string, len(runs))
	for i, r := range runs {
		ids[i], epochs[i], sfs[i], attempts[i], names[i] = r.id, r.epoch, r.sf, int32(r.attempt), r.name
	}
	rows, err := w.db.QueryContext(ctx, protoStart, ids, epochs, sfs, attempts, names, w.holder)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ok := make(map[int64]bool, len(runs))
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ok[id] = true
	}
	return ok, rows.Err()
}

func (w *protoWorker) finish(ctx context.Context, runs []protoRun) (int, error) {
	sort.Slice(runs, func(i, j int) bool { return runs[i].id < runs[j].id }) // one lock order: no deadlocks
	n := len(runs)
	ids, epochs, sfs, attempts := make([]int64, n), make([]int64, n), make([]time.Time, n), make([]int32, n)
	outcomes, errs, nexts, nextAttempts, backoffs := make([]string, n), make([]*string, n), make([]*time.Time, n), make([]int32, n), make([]*int64, n)
	for i, r := range runs {
		ids[i], epochs[i], sfs[i], attempts[i] = r.id, r.epoch, r.sf, int32(r.attempt)
		outcomes[i] = string(sqlease.OutcomeSucceeded) // one-off: no next occurrence, attempt 0
	}
	rows, err := w.db.QueryContext(ctx, protoFinish, ids, epochs, sfs, attempts, outcomes, errs, nexts, nextAttempts, backoffs, w.holder)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	done := 0
	for rows.Next() {
		done++
		w.counter.RunFinished("", sqlease.OutcomeSucceeded, 0)
	}
	return done, rows.Err()
}

func (w *protoWorker) run(ctx context.Context) {
	sem := make(chan struct{}, w.maxConc)
	var wg sync.WaitGroup
	defer wg.Wait()
	finishCh := make(chan protoRun, w.maxConc)
	if !w.perJob {
		for range 2 { // group commit: at most 2 finish statements in flight
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					var group []protoRun
					select {
					case r := <-finishCh:
						group = append(group, r)
					case <-ctx.Done():
						return
					}
				drain:
					for len(group) < 1000 {
						select {
						case r := <-finishCh:
							group = append(group, r)
						default:
							break drain
						}
					}
					n, err := w.finish(context.WithoutCancel(ctx), group)
					if err != nil {
						w.warn("run_finish_failed", err)
					} else if n != len(group) {
						w.warn("run_finish_lost", fmt.Errorf("%d of %d", len(group)-n, len(group)))
					}
					for range group {
						<-sem
					}
				}
			}()
		}
	}
	for ctx.Err() == nil {
		slots := 0
		select {
		case sem <- struct{}{}:
			slots = 1
		case <-ctx.Done():
			return
		}
	more:
		for slots < w.batch {
			select {
			case sem <- struct{}{}:
				slots++
			default:
				break more
			}
		}
		claimed, err := w.st.ClaimDue(ctx, w.holder, slots)
		for i := len(claimed); i < slots; i++ {
			<-sem
		}
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				w.warn("claim_failed", err)
			}
			continue
		}
		runs := make([]protoRun, len(claimed))
		for i, c := range claimed {
			runs[i] = protoRun{id: c.ID, epoch: c.Lock.Epoch, sf: c.NextRunAt, attempt: c.Attempt, name: c.Name}
		}
		if w.perJob {
			for _, r := range runs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					ok, err := w.start(ctx, []protoRun{r})
					if err != nil || !ok[r.id] {
						w.warn("run_start_failed", fmt.Errorf("%v", err))
						return
					}
					_ = w.counter.handle(ctx, sqlease.Run{JobID: r.id})
					if n, err := w.finish(context.WithoutCancel(ctx), []protoRun{r}); err != nil || n != 1 {
						w.warn("run_finish_failed", fmt.Errorf("%v (%d)", err, n))
					}
				}()
			}
		} else if len(runs) > 0 {
			ok, err := w.start(ctx, runs)
			if err != nil {
				w.warn("run_start_failed", err)
			}
			for _, r := range runs {
				if !ok[r.id] {
					<-sem
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = w.counter.handle(ctx, sqlease.Run{JobID: r.id})
					finishCh <- r
				}()
			}
		}
		if len(claimed) < slots {
			select { // nothing more due now
			case <-time.After(w.poll):
			case <-ctx.Done():
			}
		}
	}
}
