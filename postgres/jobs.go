package postgres

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sqlease/sqlease/sqlstore"
)

// jobQueries returns the scheduler's statements for the table prefix.
func jobQueries(prefix string) sqlstore.JobQueries {
	// StartRuns counts a started attempt in the ledger only, so every read
	// of a job takes its attempt count from both (one probe of the ledger's
	// unique index).
	attempt := func(t string) string {
		return `GREATEST(` + t + `.attempt, COALESCE((SELECT max(r.attempt) FROM ` + prefix + `_runs r
	WHERE r.job_id = ` + t + `.id AND r.scheduled_for = ` + t + `.next_run_at), 0))`
	}
	cols := strings.Replace(sqlstore.JobColumns, "attempt,", attempt(prefix+"_jobs")+",", 1)
	// Every column qualified (the lists span lines, so splitting on ", "
	// alone left some bare).
	qualify := func(cols string) string {
		q := strings.Split(cols, ",")
		for i, c := range q {
			q[i] = "j." + strings.TrimSpace(c)
		}
		return strings.Join(q, ", ")
	}
	jcols := strings.Replace(qualify(sqlstore.JobColumns), "j.attempt,", attempt("j")+",", 1)
	// ClaimStart returns what a run needs (sqlstore.ClaimColumns), and has
	// read the count once already, before its update.
	startCols := strings.Replace(qualify(sqlstore.ClaimColumns), "j.attempt,", "c.run_attempt - 1,", 1)
	r := strings.NewReplacer("{jobs}", prefix+"_jobs", "{leases}", prefix+"_leases", "{runs}", prefix+"_runs", "{out}", prefix+"_run_output", "{cols}", cols,
		"{jcols}", jcols, "{startcols}", startCols, "{runcols}", sqlstore.RunColumns,
		"{ms}", "* interval '1 millisecond'", "{added}", sqlstore.ColumnsDDL(addedColumns),
		// A job is due to claim (every claim statement says it the same
		// way, on j at the database time n.now), and its lock is stale.
		//
		// A claim's lock epoch folds in the timeline, as a lease's epoch
		// does, and a claim under a term ($3: a worker lease's or the
		// leader's epoch; 0 is a claim without a worker lease) of an older
		// timeline is refused: claims on a new timeline wait for its
		// hold-off (timeline.go).
		"{due}", "NOT j.paused AND j.next_run_at <= n.now AND (j.not_before IS NULL OR j.not_before <= n.now) AND ($3::bigint = 0 OR $3::bigint >= n.tl)",
		// {due} for the claims that scan the due index (n a CTE): the
		// bound reads n.now through a scalar subquery, a value the scan
		// can stop at. As n.now it was a filter on the join with n, so a
		// claim read the whole due index, every job due later included,
		// whenever fewer jobs than its batch were due (a trickle):
		// 10,000 jobs due over the next 10 s cost 7.3 ms of server time
		// per claim of ~10, against ~1 ms.
		"{duescan}", "NOT j.paused AND j.next_run_at <= (SELECT now FROM n) AND (j.not_before IS NULL OR j.not_before <= n.now) AND ($3::bigint = 0 OR $3::bigint >= n.tl)",
		"{claimnow}", "SELECT clock_timestamp() AS now, "+timelineBase+" AS tl",
		"{lockepoch}", "GREATEST(j.lock_epoch + 1, n.tl | 1)",
		"{stale}", "j.locked_at + j.lock_timeout_ms * interval '1 millisecond' < n.now",
		// A claim-mode worker's claim whose worker lease is gone (see
		// sqlstore.WorkerLeasePrefix): reclaimable at once.
		"{orphan}", "(j.lock_lease_epoch < 0 AND NOT EXISTS (SELECT 1 FROM "+prefix+"_leases wl WHERE wl.lease_name = '"+sqlstore.WorkerLeasePrefix+"' || j.locked_by AND wl.lease_epoch = -j.lock_lease_epoch AND wl.expires_at > n.now))",
		// A leader's claim ($2 holder, $3 lease epoch) may take a job
		// locked under an older lease epoch, or under its own: a claim of
		// its own term whose commit it never heard of (a connection cut
		// after the commit). It asks only for jobs it is not running, so
		// nothing of it acts on that lock; without this the job waited for
		// lock_timeout.
		"{ownterm}", "(j.lock_lease_epoch < $3 OR j.lock_lease_epoch = $3 AND j.locked_by = $2)")
	return withClaimStartAhead(prefix, withClaimAhead(withStartFenced(prefix, withOccurrences(prefix, withCheckpoints(prefix, withOutput(prefix, sqlstore.JobQueries{
		Migrations: []string{
			r.Replace(`CREATE TABLE IF NOT EXISTS {jobs} (
	id                    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	name                  varchar(128) NOT NULL UNIQUE,
	client_key            varchar(256),
	spec_hash             varchar(64)  NOT NULL,
	schedule              text         NOT NULL,
	action                text         NOT NULL,
	missed_runs           varchar(16)  NOT NULL,
	skip_if_older_than_ms bigint       NOT NULL DEFAULT 0,
	max_attempts          integer      NOT NULL,
	backoff_ms            bigint       NOT NULL,
	lock_timeout_ms       bigint       NOT NULL,
	paused                boolean      NOT NULL DEFAULT false,
	next_run_at           timestamptz,
	last_run_at           timestamptz,
	attempt               integer      NOT NULL DEFAULT 0,
	locked_by             varchar(128),
	locked_at             timestamptz,
	lock_epoch            bigint       NOT NULL DEFAULT 0,
	lock_lease_epoch      bigint       NOT NULL DEFAULT 0,
	not_before            timestamptz,
	created_at            timestamptz  NOT NULL,
	last_modified_at      timestamptz  NOT NULL,
	{added}
) WITH (fillfactor = 50)`),
			// A run writes its job twice (claim, finish), a batch of jobs
			// that share pages at a time. Half of each page is left for
			// the new versions, so that they stay on the page: a version
			// that moves costs another page, another WAL record and a
			// larger one (measured: a tenth less server CPU in claim mode).
			// The price is a table twice the size of its rows. Tables of
			// older schemas get it from here on (pages filled since).
			r.Replace(`DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = '{jobs}'::regclass AND reloptions::text LIKE '%fillfactor=%') THEN
		ALTER TABLE {jobs} SET (fillfactor = 50);
	END IF;
END $$`),
			r.Replace(`CREATE INDEX IF NOT EXISTS {jobs}_due ON {jobs} (next_run_at, id) WHERE NOT paused AND next_run_at IS NOT NULL`),
			// The leader's change cursor (Changed) reads only jobs with an
			// occurrence to come: a job with none has nothing to schedule.
			// So the index leaves them out, and the finish of a one-off job
			// (its last write) adds no entry to it. Older schemas had a full
			// index, {jobs}_modified.
			r.Replace(`CREATE INDEX IF NOT EXISTS {jobs}_changed ON {jobs} (last_modified_at, id) WHERE next_run_at IS NOT NULL`),
			r.Replace(`DROP INDEX IF EXISTS {jobs}_modified`),
			r.Replace(`CREATE TABLE IF NOT EXISTS {runs} (
	job_id        bigint       NOT NULL,
	job_name      varchar(128) NOT NULL,
	scheduled_for timestamptz  NOT NULL,
	attempt       integer      NOT NULL,
	holder_id     varchar(128) NOT NULL,
	epoch         bigint       NOT NULL,
	started_at    timestamptz  NOT NULL,
	finished_at   timestamptz,
	outcome       varchar(16)  NOT NULL,
	error         text,
	PRIMARY KEY (job_id, scheduled_for, attempt)
) WITH (fillfactor = 50)`),
			// The ledger's key is the attempt's identity, and no index
			// holds a column a finish writes (outcome, error, finished_at):
			// with room left on each page for the finished version of its
			// runs (fillfactor 50: a finish groups the runs of a claim, which
			// share pages) a finish is a HOT update that touches no index. A run in flight is found by
			// its key, as its occurrence is the locked job's next_run_at;
			// retention finds old runs by started_at, which is never later
			// than finished_at. Older schemas had a surrogate id, a
			// 'running' index and a finished_at index: see below.
			r.Replace(`DO $$
DECLARE u name;
BEGIN
	IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '{runs}'::regclass AND attname = 'id' AND NOT attisdropped) THEN
		SELECT conname INTO u FROM pg_constraint WHERE conrelid = '{runs}'::regclass AND contype = 'u';
		ALTER TABLE {runs} DROP COLUMN id;
		EXECUTE format('ALTER TABLE {runs} DROP CONSTRAINT %I, ADD PRIMARY KEY (job_id, scheduled_for, attempt)', u);
		ALTER TABLE {runs} SET (fillfactor = 50);
	END IF;
END $$`),
			r.Replace(`DROP INDEX IF EXISTS {runs}_running`),
			r.Replace(`DROP INDEX IF EXISTS {runs}_finished_at`),
			r.Replace(`CREATE INDEX IF NOT EXISTS {runs}_started_at ON {runs} (started_at)`),
			// A partial index leaves out the rows it never finds (no client
			// key), which every claim would otherwise pay an index entry
			// for. Older schemas had a full one.
			r.Replace(`CREATE UNIQUE INDEX IF NOT EXISTS {jobs}_client_key ON {jobs} (client_key) WHERE client_key IS NOT NULL`),
			r.Replace(`ALTER TABLE {jobs} DROP CONSTRAINT IF EXISTS {jobs}_client_key_key`),
			r.Replace(`DROP INDEX IF EXISTS {runs}_finished`),
			// One notification per writing transaction (PostgreSQL folds
			// duplicates), for the leader's change feed (ListenJobs): only
			// the API's writes (create, delete, pause/resume and trigger,
			// which all name paused) notify. The dispatcher's own claims,
			// starts and finishes do not: the leader already knows them, and
			// a notification costs about a third of a claim-mode run.
			r.Replace(`CREATE OR REPLACE FUNCTION {jobs}_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('{jobs}', '');
	RETURN NULL;
END $$`),
			r.Replace(`CREATE OR REPLACE TRIGGER {jobs}_notify AFTER INSERT OR UPDATE OF paused OR DELETE ON {jobs}
FOR EACH STATEMENT EXECUTE FUNCTION {jobs}_notify()`),
		},
		Now: `SELECT clock_timestamp()`,
		InsertJob: r.Replace(`WITH n AS (SELECT clock_timestamp() AS now)
INSERT INTO {jobs} (name, client_key, spec_hash, schedule, action, missed_runs, skip_if_older_than_ms,
	max_attempts, backoff_ms, lock_timeout_ms, paused, next_run_at, breaker_failures, breaker_cool_down_ms, created_at, last_modified_at)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, n.now, n.now FROM n
ON CONFLICT DO NOTHING
RETURNING {cols}`),
		// One statement per chunk of a bulk create: each column an array.
		InsertJobs: r.Replace(`WITH n AS (SELECT clock_timestamp() AS now)
INSERT INTO {jobs} (name, client_key, spec_hash, schedule, action, missed_runs, skip_if_older_than_ms,
	max_attempts, backoff_ms, lock_timeout_ms, paused, next_run_at, breaker_failures, breaker_cool_down_ms, created_at, last_modified_at)
SELECT u.*, n.now, n.now FROM n, unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
	$7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::boolean[], $12::timestamptz[], $13::bigint[], $14::bigint[]) AS u
ON CONFLICT DO NOTHING
RETURNING {cols}`),
		JobByName: r.Replace(`SELECT {cols} FROM {jobs} WHERE name = $1`),
		JobByKey:  r.Replace(`SELECT {cols} FROM {jobs} WHERE client_key = $1`),
		ListJobs:  r.Replace(`SELECT {cols} FROM {jobs} WHERE name > $1 ORDER BY name LIMIT $2`),
		DeleteJob: r.Replace(`DELETE FROM {jobs} WHERE name = $1`),
		SetPaused: r.Replace(`UPDATE {jobs} SET paused = $2, pause_reason = $3, last_modified_at = clock_timestamp() WHERE name = $1 RETURNING {cols}`),
		PauseLike: r.Replace(`UPDATE {jobs} SET paused = $1, pause_reason = $2, last_modified_at = clock_timestamp() WHERE name LIKE $3 ESCAPE '!'`),
		// paused = paused fires the change notification (see above).
		Trigger: r.Replace(`UPDATE {jobs} j SET
	regular_next_at = CASE WHEN j.regular_next_at > n.now THEN j.regular_next_at WHEN j.next_run_at > n.now THEN j.next_run_at END,
	attempt = CASE WHEN j.next_run_at <= n.now THEN j.attempt ELSE 0 END,
	next_run_at = CASE WHEN j.next_run_at <= n.now THEN j.next_run_at ELSE n.now END,
	not_before = NULL, paused = j.paused, last_modified_at = n.now
FROM (SELECT clock_timestamp() AS now) n
WHERE j.name = $1 AND NOT j.paused AND j.locked_by IS NULL RETURNING {jcols}`),
		SetBreaker: r.Replace(`UPDATE {jobs} SET breaker_count = $1, breaker_opened_at = CASE WHEN $2::int = 1 THEN n.now END,
	breaker_changed_at = CASE WHEN $3::int = 1 THEN n.now ELSE breaker_changed_at END
FROM (SELECT clock_timestamp() AS now) n
WHERE id = $4 AND locked_by = $5 AND lock_epoch = $6`),
		ClaimDue: r.Replace(`WITH n AS ({claimnow}),
c AS (
	SELECT j.id, j.locked_by AS prev FROM {jobs} j, n
	WHERE {duescan} AND (j.locked_by IS NULL OR {stale} OR {orphan})
	ORDER BY j.next_run_at, j.id
	LIMIT $2
	FOR UPDATE OF j SKIP LOCKED
)
UPDATE {jobs} j SET locked_by = $1, locked_at = n.now, lock_epoch = {lockepoch},
	lock_lease_epoch = -$3::bigint
FROM c, n WHERE j.id = c.id` + byKey + `
RETURNING {jcols}, n.now, c.prev IS NOT NULL`),
		ClaimDueReclaimed: true,
		ClaimJob: r.Replace(`UPDATE {jobs} j SET locked_by = $2, locked_at = n.now, lock_epoch = {lockepoch},
	lock_lease_epoch = $3
FROM ({claimnow}) n
WHERE j.id = $1 AND {due}
  AND (j.locked_by IS NULL OR {stale} OR {ownterm})
RETURNING {jcols}, n.now`),
		// SKIP LOCKED: a row another transaction holds is left for a
		// later claim rather than stalling the batch; id order is the
		// lock order of every multi-job statement.
		ClaimJobs: r.Replace(`WITH n AS ({claimnow}),
c AS (
	SELECT j.id, j.locked_by AS prev FROM {jobs} j, n
	WHERE j.id = ANY($1::bigint[]) AND {due}
	  AND (j.locked_by IS NULL OR {stale} OR {ownterm})
	ORDER BY j.id
	FOR UPDATE OF j SKIP LOCKED
)
UPDATE {jobs} j SET locked_by = $2, locked_at = n.now, lock_epoch = {lockepoch},
	lock_lease_epoch = $3
FROM c, n WHERE j.id = c.id
RETURNING {jcols}, n.now, c.prev IS NOT NULL`),
		AbandonDeleted: r.Replace(`UPDATE {runs} SET outcome = 'abandoned', finished_at = clock_timestamp(), error = 'job deleted while running'
WHERE job_id = $1 AND outcome = 'running'`),
		AbandonRunning: r.Replace(`UPDATE {runs} SET outcome = 'abandoned', finished_at = clock_timestamp(),
	error = 'the executing instance stopped heartbeating its lock'
WHERE job_id = $1 AND scheduled_for = (SELECT next_run_at FROM {jobs} WHERE id = $1) AND outcome = 'running'`),
		StartJob: r.Replace(`UPDATE {jobs} SET next_run_at = $1, attempt = $2, locked_at = clock_timestamp(), last_modified_at = clock_timestamp()
WHERE id = $3 AND locked_by = $4 AND lock_epoch = $5`),
		InsertRun: r.Replace(`INSERT INTO {runs} (job_id, job_name, scheduled_for, attempt, holder_id, epoch, started_at, outcome)
VALUES ($1, $2, $3, $4, $5, $6, clock_timestamp(), 'running')`),
		// The three writes of a start as one statement: data-modifying CTEs
		// all run, atomically, whatever the outer query reads.
		StartRunOne: r.Replace(`WITH j AS (
	UPDATE {jobs} SET next_run_at = $4, attempt = $5, locked_at = clock_timestamp(), last_modified_at = clock_timestamp()
	WHERE id = $1 AND locked_by = $2 AND lock_epoch = $3
	RETURNING id
), a AS (
	UPDATE {runs} SET outcome = 'abandoned', finished_at = clock_timestamp(),
		error = 'the executing instance stopped heartbeating its lock'
	WHERE job_id = $1 AND scheduled_for = (SELECT next_run_at FROM {jobs} WHERE id = $1) AND outcome = 'running'
		AND EXISTS (SELECT 1 FROM j)
), i AS (
	INSERT INTO {runs} (job_id, job_name, scheduled_for, attempt, holder_id, epoch, started_at, outcome)
	SELECT $1, $6, $4, $5, $2, $7, clock_timestamp(), 'running' FROM j
)
SELECT count(*) FROM j`),
		FinishRunOne: r.Replace(`WITH n AS (SELECT clock_timestamp() AS now), j AS (
	UPDATE {jobs} SET locked_by = NULL, locked_at = NULL, lock_lease_epoch = 0,
		next_run_at = $4, attempt = $5, not_before = n.now + $6::bigint {ms},
		last_run_at = n.now, last_modified_at = n.now
	FROM n WHERE id = $1 AND locked_by = $2 AND lock_epoch = $3
	RETURNING id
), r AS (
	UPDATE {runs} SET outcome = $7, error = $8, finished_at = (SELECT now FROM n)
	WHERE job_id = $1 AND scheduled_for = $9 AND attempt = $10 AND outcome = 'running' AND EXISTS (SELECT 1 FROM j)
)
SELECT count(*) FROM j`),
		// The claim holds its rows locked until it commits, so the runs it
		// inserts need no further lock check. A one-off job is one whose
		// schedule (encoding/json of sqlease.Schedule) has no "every" or
		// "cron" key: a quote inside a value is escaped, so the keys cannot
		// appear by accident, and a text search is cheaper than jsonb. The attempt a run would have
		// is computed before the update: the ledger read sees no run this
		// statement inserts.
		ClaimStart: r.Replace(claimStartScan(`{duescan}
	AND (j.locked_by IS NULL OR {stale} OR {orphan})
	ORDER BY j.next_run_at, j.id
	LIMIT $2`, "$1", "-$3::bigint", "u.lock_epoch")),
		// The cursor is a condition of the due index's scan, which starts
		// there.
		ClaimStartAfter: r.Replace(claimStartScan(`{duescan} AND (j.next_run_at, j.id) > ($4::timestamptz, $5::bigint)
	AND (j.locked_by IS NULL OR {stale} OR {orphan})
	ORDER BY j.next_run_at, j.id
	LIMIT $2`, "$1", "-$3::bigint", "u.lock_epoch")),
		// The leader's ClaimJobs and ClaimStart in one: the jobs it names,
		// claimed under its lease epoch, and the runs of the one-off ones
		// started under that epoch, in its fenced transaction.
		ClaimStartJobs: r.Replace(claimStart(`j.id = ANY($1::bigint[]) AND {due}
	  AND (j.locked_by IS NULL OR {stale} OR {ownterm})
	ORDER BY j.id`, "$2", "$3", "$3")),
		// ClaimStartJobs and FinishRuns fenced in their own statement, for
		// a leader that would otherwise pay a transaction of five round
		// trips (BEGIN, FenceLock, the write, FenceCheck, COMMIT) for each:
		// the lease row is checked and share-locked (as FenceLock does) by a
		// CTE that the statement's first write joins, so that nothing is
		// written unless the lease holds, and no acquire can take the lease
		// until the statement commits. Run outside a transaction, the
		// statement commits as it ends, without waiting for its client: no
		// frozen holder can keep the lease row locked (which FenceLock's
		// timeouts guard against in a transaction).
		ClaimStartJobsFenced: r.Replace(fenced(claimStart(`j.id = ANY($1::bigint[]) AND {due}
	  AND (j.locked_by IS NULL OR {stale} OR {ownterm})
	ORDER BY j.id`, "$2", "$3", "$3"), "$4", "$2", "$3", "FROM {jobs} j, n\n")),
		// FOR SHARE holds each job row until the insert commits, so that a
		// reclaim (which bumps lock_epoch) cannot slip between the lock
		// check and the start.
		StartRuns: r.Replace(`WITH v AS (
	SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::timestamptz[], $4::int[], $5::text[], $6::text[], $7::bigint[])
		AS v(id, epoch, sf, attempt, name, holder, run_epoch)
), l AS (
	SELECT j.id FROM {jobs} j JOIN v ON j.id = v.id
	WHERE j.id = ANY($1::bigint[]) AND j.locked_by = v.holder AND j.lock_epoch = v.epoch
	FOR SHARE OF j
)
INSERT INTO {runs} (job_id, job_name, scheduled_for, attempt, holder_id, epoch, started_at, outcome)
SELECT v.id, v.name, v.sf, v.attempt, v.holder, v.run_epoch, clock_timestamp(), 'running' FROM v JOIN l ON l.id = v.id
ON CONFLICT DO NOTHING
RETURNING job_id`),
		FinishRuns:       r.Replace(finishRuns),
		FinishRunsFenced: r.Replace(fenced(finishRuns, "$12", "$13", "$14", "FROM v, n WHERE")),
		OwnClaims:        r.Replace(`SELECT id, lock_epoch, next_run_at, attempt FROM {jobs} WHERE locked_by = $1 AND lock_lease_epoch = $2`),
		Heartbeat:        r.Replace(`UPDATE {jobs} SET locked_at = clock_timestamp() WHERE id = $1 AND locked_by = $2 AND lock_epoch = $3`),
		FinishRun: r.Replace(`UPDATE {runs} SET outcome = $1, error = $2, finished_at = clock_timestamp()
WHERE job_id = $3 AND scheduled_for = $4 AND attempt = $5 AND outcome = 'running'`),
		ReleaseJob: r.Replace(`UPDATE {jobs} SET locked_by = NULL, locked_at = NULL, lock_lease_epoch = 0,
	next_run_at = $1, attempt = $2, not_before = n.now + $3::bigint {ms},
	last_run_at = n.now, last_modified_at = n.now
FROM (SELECT clock_timestamp() AS now) n
WHERE id = $4 AND locked_by = $5 AND lock_epoch = $6`),
		RunsBefore: r.Replace(`SELECT {runcols} FROM {runs}
WHERE job_id = (SELECT id FROM {jobs} WHERE name = $1) AND (scheduled_for, attempt) < ($2, $3)
ORDER BY scheduled_for DESC, attempt DESC LIMIT $4`),
		Runs: r.Replace(`SELECT {runcols} FROM {runs}
WHERE job_id = (SELECT id FROM {jobs} WHERE name = $1) ORDER BY scheduled_for DESC, attempt DESC LIMIT $2`),
		Stats: r.Replace(`SELECT count(*), count(*) FILTER (WHERE paused),
	count(*) FILTER (WHERE NOT paused AND next_run_at <= clock_timestamp()),
	count(*) FILTER (WHERE locked_by IS NOT NULL) FROM {jobs}`),
		// A run finished before the cutoff started before it too: the
		// started_at range is the index scan, finished_at the condition.
		PruneRuns: r.Replace(`DELETE FROM {runs} r USING (SELECT clock_timestamp() - $1::bigint {ms} AS t) c
WHERE r.started_at < c.t AND r.finished_at < c.t`),
		// The window's end is a bound of the due index's scan (a scalar
		// subquery, as in {duescan}), not a filter on a join.
		DueWindow: r.Replace(`WITH n AS (SELECT clock_timestamp() AS now)
SELECT j.id, GREATEST(j.next_run_at, COALESCE(j.not_before, j.next_run_at)), j.last_modified_at, n.now
FROM {jobs} j, n
WHERE NOT j.paused AND j.next_run_at IS NOT NULL AND j.next_run_at < (SELECT now FROM n) + $1::bigint {ms}
ORDER BY j.next_run_at, j.id LIMIT $2`),
		// The due index's first entry past now (next_run_at > now implies
		// the index's predicate).
		NextDue: r.Replace(`WITH n AS (SELECT clock_timestamp() AS now)
SELECT EXTRACT(EPOCH FROM (SELECT min(next_run_at) FROM {jobs} WHERE NOT paused AND next_run_at > (SELECT now FROM n)) - n.now) * 1000
FROM n`),
		Changed: r.Replace(`SELECT id, paused, GREATEST(next_run_at, COALESCE(not_before, next_run_at)), last_modified_at FROM {jobs}
WHERE last_modified_at >= $1 AND (last_modified_at, id) > ($2, $3) AND next_run_at IS NOT NULL
ORDER BY last_modified_at, id LIMIT $4`),
	}))))))
}

// finishRuns is JobQueries.FinishRuns.
const finishRuns = `WITH v AS (
	SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::timestamptz[], $5::int[], $6::bigint[],
		$7::text[], $8::text[], $9::timestamptz[], $10::int[], $11::text[])
		AS v(id, epoch, holder, next, next_attempt, backoff_ms, outcome, err, sf, run_attempt, out)
), n AS (SELECT clock_timestamp() AS now),
j AS (
	UPDATE {jobs} j SET locked_by = NULL, locked_at = NULL, lock_lease_epoch = 0,
		next_run_at = v.next, attempt = v.next_attempt, not_before = n.now + v.backoff_ms {ms},
		last_run_at = n.now, last_modified_at = n.now
	FROM v, n WHERE j.id = ANY($1::bigint[]) AND j.id = v.id AND j.locked_by = v.holder AND j.lock_epoch = v.epoch
	RETURNING j.id
), r AS (
	UPDATE {runs} r SET outcome = v.outcome, error = v.err, finished_at = (SELECT now FROM n)
	FROM v JOIN j ON j.id = v.id
	WHERE r.job_id = v.id AND r.scheduled_for = v.sf AND r.attempt = v.run_attempt AND r.outcome = 'running'
), o AS (
	INSERT INTO {out} (job_id, scheduled_for, attempt, finished_at, output)
	SELECT v.id, v.sf, v.run_attempt, n.now, v.out FROM v JOIN j ON j.id = v.id, n WHERE v.out IS NOT NULL
	ON CONFLICT DO NOTHING
)
SELECT id FROM j`

// fenced returns the statement stmt (a WITH query) with the lease fence of
// Queries.FenceLock as its first CTE, f, on (name, holder, epoch) (the
// parameters that say them), joined into the FROM list that from begins
// (it must occur once): the statement's first write then writes no row
// unless the lease holds.
func fenced(stmt, name, holder, epoch, from string) string {
	if !strings.HasPrefix(stmt, "WITH ") || strings.Count(stmt, from) != 1 {
		panic("postgres: cannot fence statement at " + from)
	}
	f := `WITH f AS (
	SELECT 1 FROM {leases} WHERE lease_name = ` + name + ` AND holder_id = ` + holder + ` AND lease_epoch = ` + epoch + `::bigint
		AND expires_at > clock_timestamp()
	FOR SHARE
), `
	joined := strings.Replace(from, " n", " n, f", 1)
	return f + strings.Replace(stmt[len("WITH "):], from, joined, 1)
}

// addedColumns are the jobs table's columns newer than its first version:
// part of CREATE TABLE for a new schema, added to an older one by
// sqlstore.AddColumns (sqlstore.Column; adding a nullable column, or one with a
// constant default, rewrites no row).
var addedColumns = [][2]string{
	{"pause_reason", "text"},
	{"regular_next_at", "timestamptz"},
	{"breaker_failures", "integer NOT NULL DEFAULT 0"},
	{"breaker_cool_down_ms", "bigint NOT NULL DEFAULT 0"},
	{"breaker_count", "integer NOT NULL DEFAULT 0"},
	{"breaker_opened_at", "timestamptz"},
	{"breaker_changed_at", "timestamptz"},
}

// isUniqueViolation reports SQLSTATE 23505.
func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// claimStart is the statement of ClaimStart and ClaimStartJobs: claim the
// jobs that where selects (with its ORDER BY and LIMIT) for holder, with
// leaseEpoch as lock_lease_epoch, and start the runs of the one-off ones
// among them under runEpoch.
//
// The runs are inserted without ON CONFLICT: each takes the attempt after
// every one the ledger shows for its occurrence, on a job no one held, so
// its key is new. Only a run committed after the statement's snapshot, on a
// job released since without counting it, could collide; the statement then
// fails whole, claims nothing, and the next claim reads that run. A
// speculative insert costs half as much again as a plain one (measured:
// 1.76 against 1.19 ms per 256 rows), on every claim.
//
// A prepared statement may switch to a generic plan, which guesses the
// claim's size (a tenth of the due rows for a LIMIT of a parameter, ten
// rows for an array): so no step may cost the square of the batch under a
// wrong guess. Whether a claimed job's run started is a hashed IN, not a
// join of u and i, which a guess of one row a side made a nested loop of
// 256 × 256 rows.
func claimStart(where, holder, leaseEpoch, runEpoch string) string {
	return claimStartJoin(where, holder, leaseEpoch, runEpoch, "")
}

// claimStartScan is claimStart for a claim that scans the due index: its
// update reaches the jobs c locked by the primary key (byKey).
func claimStartScan(where, holder, leaseEpoch, runEpoch string) string {
	return claimStartJoin(where, holder, leaseEpoch, runEpoch, byKey)
}

// byKey, added to an update's join with c, has the update reach the jobs
// c claimed by their ids as an array, by the primary key: joined only to
// c, whose size the planner guesses from the claim's LIMIT, the update
// read a table of under ~30,000 jobs whole (a sequential scan, 3 ms at
// 10,000 jobs) at every claim, however few it claimed. Only for the
// claims that scan the due index: an array's guess is ten rows, and
// beside a claim of named jobs (a guess of a few) that made a nested loop
// matching every claimed row against every other.
const byKey = " AND j.id = ANY(ARRAY(SELECT id FROM c))"

func claimStartJoin(where, holder, leaseEpoch, runEpoch, join string) string {
	return `WITH n AS ({claimnow}),
c AS (
	SELECT j.id, j.locked_by AS prev, GREATEST(j.attempt, COALESCE((SELECT max(r.attempt) FROM {runs} r
		WHERE r.job_id = j.id AND r.scheduled_for = j.next_run_at), 0)) + 1 AS run_attempt
	FROM {jobs} j, n
	WHERE ` + where + `
	FOR UPDATE OF j SKIP LOCKED
), u AS (
	UPDATE {jobs} j SET locked_by = ` + holder + `, locked_at = n.now, lock_epoch = {lockepoch},
		lock_lease_epoch = ` + leaseEpoch + `
	FROM c, n WHERE j.id = c.id` + join + `
	RETURNING {startcols}, n.now AS claim_now, c.prev IS NOT NULL AS reclaimed, c.run_attempt,
		c.prev IS NULL AND c.run_attempt <= j.max_attempts
		AND strpos(j.schedule, '"every"') = 0 AND strpos(j.schedule, '"cron"') = 0
		AND (j.skip_if_older_than_ms = 0 OR j.next_run_at >= n.now - j.skip_if_older_than_ms {ms}) AS one_off_due
), i AS (
	INSERT INTO {runs} (job_id, job_name, scheduled_for, attempt, holder_id, epoch, started_at, outcome)
	SELECT u.id, u.name, u.next_run_at, u.run_attempt, ` + holder + `, ` + runEpoch + `, u.claim_now, 'running' FROM u WHERE u.one_off_due
	RETURNING job_id
)
SELECT u.*, u.id IN (SELECT i.job_id FROM i) FROM u`
}
