package mysql

import (
	"strings"
	"time"

	"github.com/sqlease/sqlease/sqlstore"
)

// timeArg passes a time parameter at the columns' microsecond precision.
// The driver would send nanoseconds, which MariaDB truncates and MySQL rounds
// when storing, so that a time stored and a time compared could differ.
func timeArg(t time.Time) any { return t.UTC().Truncate(time.Microsecond) }

// jobQueries returns the scheduler's statements for the table prefix.
func jobQueries(prefix string) sqlstore.JobQueries {
	// A batch start (StartRunIf) counts a started attempt in the ledger
	// only, so every read of a job takes its attempt count from both (one
	// probe of the ledger's unique key), as on PostgreSQL and SQLite.
	cols := strings.Replace(sqlstore.JobColumns, "attempt,", `GREATEST(attempt, COALESCE((SELECT MAX(r.attempt) FROM `+prefix+`_runs r
	WHERE r.job_id = `+prefix+`_jobs.id AND r.scheduled_for = `+prefix+`_jobs.next_run_at), 0)),`, 1)
	r := strings.NewReplacer("{jobs}", prefix+"_jobs", "{runs}", prefix+"_runs", "{cols}", cols,
		"{runcols}", sqlstore.RunColumns, "{now}", now, "{options}", tableOptions, "{leases}", prefix+"_leases",
		"{added}", sqlstore.ColumnsDDL(addedColumns))
	stale := plusMS("locked_at", "lock_timeout_ms") + ` < {now}`
	// A job claim mode may take: due, and unlocked, stale, or claimed
	// under a worker lease that is gone.
	claimable := strings.NewReplacer("{stale}", stale).Replace(`paused = 0 AND next_run_at <= {now}
  AND (not_before IS NULL OR not_before <= {now})
  AND (locked_by IS NULL OR {stale}
       OR (j.lock_lease_epoch < 0 AND NOT EXISTS (SELECT 1 FROM {leases} wl WHERE wl.lease_name = CONCAT('` + sqlstore.WorkerLeasePrefix + `', j.locked_by)
           AND wl.lease_epoch = -j.lock_lease_epoch AND wl.expires_at > {now})))`)
	withClaimable := func(q string) string { return r.Replace(strings.ReplaceAll(q, "{claimable}", claimable)) }
	return withOccurrences(prefix, withCheckpoints(prefix, withOutput(prefix, sqlstore.JobQueries{
		Migrations: []string{
			// MySQL has no partial indexes, nor CREATE INDEX IF NOT EXISTS:
			// the indexes are part of the table.
			r.Replace(`CREATE TABLE IF NOT EXISTS {jobs} (
	id                    bigint       NOT NULL AUTO_INCREMENT PRIMARY KEY,
	name                  varchar(128) NOT NULL,
	client_key            varchar(256),
	spec_hash             varchar(64)  NOT NULL,
	schedule              text         NOT NULL,
	action                mediumtext   NOT NULL,
	missed_runs           varchar(16)  NOT NULL,
	skip_if_older_than_ms bigint       NOT NULL DEFAULT 0,
	max_attempts          int          NOT NULL,
	backoff_ms            bigint       NOT NULL,
	lock_timeout_ms       bigint       NOT NULL,
	paused                boolean      NOT NULL DEFAULT false,
	next_run_at           datetime(6),
	last_run_at           datetime(6),
	attempt               int          NOT NULL DEFAULT 0,
	locked_by             varchar(128),
	locked_at             datetime(6),
	lock_epoch            bigint       NOT NULL DEFAULT 0,
	lock_lease_epoch      bigint       NOT NULL DEFAULT 0,
	not_before            datetime(6),
	created_at            datetime(6)  NOT NULL,
	last_modified_at      datetime(6)  NOT NULL,
	{added},
	UNIQUE KEY name (name),
	UNIQUE KEY client_key (client_key),
	KEY due (paused, next_run_at, id),
	KEY modified (last_modified_at, id)
) {options}`),
			r.Replace(`CREATE TABLE IF NOT EXISTS {runs} (
	id            bigint       NOT NULL AUTO_INCREMENT PRIMARY KEY,
	job_id        bigint       NOT NULL,
	job_name      varchar(128) NOT NULL,
	scheduled_for datetime(6)  NOT NULL,
	attempt       int          NOT NULL,
	holder_id     varchar(128) NOT NULL,
	epoch         bigint       NOT NULL,
	started_at    datetime(6)  NOT NULL,
	finished_at   datetime(6),
	outcome       varchar(16)  NOT NULL,
	error         mediumtext,
	UNIQUE KEY occurrence (job_id, scheduled_for, attempt),
	KEY running (job_id, outcome),
	KEY finished (finished_at)
) {options}`),
		},
		Now: `SELECT ` + now,
		// ON DUPLICATE KEY UPDATE of nothing: a clash with the name or the
		// key changes no row, and other errors (unlike INSERT IGNORE's)
		// still fail.
		InsertJobWR: sqlstore.WriteRead{
			Write: r.Replace(`INSERT INTO {jobs} (name, client_key, spec_hash, schedule, action, missed_runs, skip_if_older_than_ms,
	max_attempts, backoff_ms, lock_timeout_ms, paused, next_run_at, breaker_failures, breaker_cool_down_ms, created_at, last_modified_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {now}, {now})
ON DUPLICATE KEY UPDATE id = id`),
			Read: r.Replace(`SELECT {cols} FROM {jobs} WHERE name = ?`),
		},
		JobByName: r.Replace(`SELECT {cols} FROM {jobs} WHERE name = ?`),
		JobByKey:  r.Replace(`SELECT {cols} FROM {jobs} WHERE client_key = ?`),
		ListJobs:  r.Replace(`SELECT {cols} FROM {jobs} WHERE name > ? ORDER BY name LIMIT ?`),
		DeleteJob: r.Replace(`DELETE FROM {jobs} WHERE name = ?`),
		// last_modified_at moves forward by at least a microsecond, so the
		// write changes the row (and counts) even when it sets paused to
		// its value in the same microsecond as another write.
		SetPausedWR: sqlstore.WriteRead{
			Write: r.Replace(`UPDATE {jobs} SET paused = ?, pause_reason = ?,
	last_modified_at = GREATEST({now}, last_modified_at + INTERVAL 1 MICROSECOND)
WHERE name = ?`),
			Read: r.Replace(`SELECT {cols} FROM {jobs} WHERE name = ?`),
		},
		// Each matched row changes (last_modified_at), so rows affected
		// counts them all (clientFoundRows=false counts changed rows).
		PauseLike: r.Replace(`UPDATE {jobs} SET paused = ?, pause_reason = ?,
	last_modified_at = GREATEST({now}, last_modified_at + INTERVAL 1 MICROSECOND)
WHERE name LIKE ? ESCAPE '!'`),
		// An UPDATE assigns left to right, each assignment seeing the
		// columns assigned before it: next_run_at, which the others read,
		// comes last.
		TriggerWR: sqlstore.WriteRead{
			Write: r.Replace(`UPDATE {jobs} SET
	regular_next_at = CASE WHEN regular_next_at > {now} THEN regular_next_at WHEN next_run_at > {now} THEN next_run_at END,
	attempt = IF(next_run_at <= {now}, attempt, 0),
	next_run_at = IF(next_run_at <= {now}, next_run_at, {now}),
	not_before = NULL, last_modified_at = GREATEST({now}, last_modified_at + INTERVAL 1 MICROSECOND)
WHERE name = ? AND paused = 0 AND locked_by IS NULL`),
			Read: r.Replace(`SELECT {cols} FROM {jobs} WHERE name = ?`),
		},
		// A claim in three steps, so that only the jobs it claims are
		// locked (see sqlstore.JobQueries.ClaimCandidates); SKIP LOCKED
		// passes over the jobs other workers are claiming.
		ClaimCandidates: withClaimable(`SELECT id FROM {jobs} AS j WHERE {claimable}
ORDER BY next_run_at, id
LIMIT ?`),
		// ClaimCandidates that also tells when the next job falls due, so
		// that an idle poll learns it without a statement more. Both
		// halves see one UTC_TIMESTAMP(6): the statement's start.
		ClaimPeek: withClaimable(`SELECT c.id, NULL FROM (SELECT id FROM {jobs} AS j WHERE {claimable}
ORDER BY next_run_at, id
LIMIT ?) AS c
UNION ALL
SELECT NULL, TIMESTAMPDIFF(MICROSECOND, n.now, MIN(j.next_run_at)) / 1000.0
FROM {jobs} j, (SELECT {now} AS now) n WHERE j.paused = 0 AND j.next_run_at > n.now`),
		ClaimLockIDs: withClaimable(`SELECT id, locked_by IS NOT NULL FROM {jobs} AS j WHERE id IN ({ids}) AND {claimable}
ORDER BY next_run_at, id
FOR UPDATE SKIP LOCKED`),
		// The leader's claim of the jobs it names (ClaimJobWR's condition),
		// in id order, the lock order of every multi-job statement.
		ClaimLockJobs: r.Replace(`SELECT id, locked_by IS NOT NULL FROM {jobs}
WHERE id IN ({ids}) AND paused = 0 AND next_run_at <= {now}
  AND (not_before IS NULL OR not_before <= {now})
  AND (locked_by IS NULL OR ` + stale + ` OR lock_lease_epoch < ?
       OR lock_lease_epoch = ? AND locked_by = ?)
ORDER BY id
FOR UPDATE SKIP LOCKED`),
		// A batch start's run, only while the job's lock is held: the
		// shared lock on the job row holds it until the transaction
		// commits (at READ COMMITTED an INSERT … SELECT reads without
		// locks otherwise), so a reclaim cannot slip in between. The
		// arguments come first as a derived table, so that they are in
		// the store's order (job_id, holder, lock_epoch, job_name,
		// scheduled_for, attempt, epoch). A run already started changes
		// nothing and counts no row.
		StartRunIf: r.Replace(`INSERT INTO {runs} (job_id, job_name, scheduled_for, attempt, holder_id, epoch, started_at, outcome)
SELECT j.id, v.name, v.sf, v.attempt, j.locked_by, v.epoch, {now}, 'running'
FROM (SELECT ? AS id, ? AS holder, ? AS lock_epoch, ? AS name, ? AS sf, ? AS attempt, ? AS epoch) AS v
JOIN {jobs} j ON j.id = v.id AND j.locked_by = v.holder AND j.lock_epoch = v.lock_epoch
LOCK IN SHARE MODE
ON DUPLICATE KEY UPDATE job_id = {runs}.job_id`),
		ClaimIDsWR: sqlstore.WriteRead{
			Write: r.Replace(`UPDATE {jobs} SET locked_by = ?, locked_at = {now}, lock_epoch = lock_epoch + 1, lock_lease_epoch = ?
WHERE id IN ({ids})`),
			Read: r.Replace(`SELECT {cols}, locked_at FROM {jobs} WHERE id IN ({ids}) ORDER BY next_run_at, id`),
		},
		ClaimJobWR: sqlstore.WriteRead{
			Write: r.Replace(`UPDATE {jobs} SET locked_by = ?, locked_at = {now}, lock_epoch = lock_epoch + 1,
	lock_lease_epoch = ?
WHERE id = ? AND paused = 0 AND next_run_at <= {now}
  AND (not_before IS NULL OR not_before <= {now})
  AND (locked_by IS NULL OR ` + stale + ` OR lock_lease_epoch < ?
       OR lock_lease_epoch = ? AND locked_by = ?)`),
			// The claim's clock reading is locked_at.
			Read: r.Replace(`SELECT {cols}, locked_at FROM {jobs} WHERE id = ?`),
		},
		AbandonDeleted: r.Replace(`UPDATE {runs} SET outcome = 'abandoned', finished_at = {now}, error = 'job deleted while running'
WHERE job_id = ? AND outcome = 'running'`),
		// Only the run of the locked job's occurrence: an overlap allow
		// job's other occurrences run under locks of their own.
		AbandonRunning: r.Replace(`UPDATE {runs} r JOIN {jobs} j ON j.id = r.job_id
SET r.outcome = 'abandoned', r.finished_at = {now}, r.error = 'the executing instance stopped heartbeating its lock'
WHERE r.job_id = ? AND r.scheduled_for = j.next_run_at AND r.outcome = 'running'`),
		StartJob: r.Replace(`UPDATE {jobs} SET next_run_at = ?, attempt = ?, locked_at = {now}, last_modified_at = {now}
WHERE id = ? AND locked_by = ? AND lock_epoch = ?`),
		InsertRun: r.Replace(`INSERT INTO {runs} (job_id, job_name, scheduled_for, attempt, holder_id, epoch, started_at, outcome)
VALUES (?, ?, ?, ?, ?, ?, {now}, 'running')`),
		OwnClaims: r.Replace(`SELECT id, lock_epoch, next_run_at, attempt FROM {jobs} WHERE locked_by = ? AND lock_lease_epoch = ?`),
		Heartbeat: r.Replace(`UPDATE {jobs} SET locked_at = {now} WHERE id = ? AND locked_by = ? AND lock_epoch = ?`),
		// last_modified_at moves, so that the row always changes and counts
		// (clientFoundRows=false) while the lock is held.
		SetBreaker: r.Replace(`UPDATE {jobs} SET breaker_count = ?, breaker_opened_at = IF(? = 1, {now}, NULL),
	breaker_changed_at = IF(? = 1, {now}, breaker_changed_at),
	last_modified_at = GREATEST({now}, last_modified_at + INTERVAL 1 MICROSECOND)
WHERE id = ? AND locked_by = ? AND lock_epoch = ?`),
		FinishRun: r.Replace(`UPDATE {runs} SET outcome = ?, error = ?, finished_at = {now}
WHERE job_id = ? AND scheduled_for = ? AND attempt = ? AND outcome = 'running'`),
		ReleaseJob: r.Replace(`UPDATE {jobs} SET locked_by = NULL, locked_at = NULL, lock_lease_epoch = 0,
	next_run_at = ?, attempt = ?, not_before = ` + plusMS(now, "?") + `,
	last_run_at = {now}, last_modified_at = {now}
WHERE id = ? AND locked_by = ? AND lock_epoch = ?`),
		// A batch finish, the group as one JSON argument (see
		// sqlstore.FinishJSON; its Output is withOutput's). The job rows
		// are locked in the array's order, job id, the lock order:
		// STRAIGHT_JOIN reads the array first. A missing member is NULL.
		FinishRunsJSON: sqlstore.FinishJSON{
			Lock: r.Replace(`SELECT v.i FROM JSON_TABLE(?, '$[*]' COLUMNS (i int PATH '$.i', id bigint PATH '$.id',
	holder varchar(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.holder', epoch bigint PATH '$.epoch')) v
STRAIGHT_JOIN {jobs} j ON j.id = v.id AND j.locked_by = v.holder AND j.lock_epoch = v.epoch
FOR UPDATE`),
			Release: r.Replace(`UPDATE {jobs} j JOIN JSON_TABLE(?, '$[*]' COLUMNS (id bigint PATH '$.id', next_run_at datetime(6) PATH '$.next',
	attempt int PATH '$.attempt', backoff bigint PATH '$.backoff')) v ON j.id = v.id
SET j.locked_by = NULL, j.locked_at = NULL, j.lock_lease_epoch = 0,
	j.next_run_at = v.next_run_at, j.attempt = v.attempt, j.not_before = ` + plusMS(now, "v.backoff") + `,
	j.last_run_at = {now}, j.last_modified_at = {now}`),
			Finish: r.Replace(`UPDATE {runs} r JOIN JSON_TABLE(?, '$[*]' COLUMNS (id bigint PATH '$.id', sf datetime(6) PATH '$.sf',
	attempt int PATH '$.attempt', outcome varchar(16) PATH '$.outcome',
	error_text mediumtext CHARACTER SET utf8mb4 PATH '$.error')) v
	ON r.job_id = v.id AND r.scheduled_for = v.sf AND r.attempt = v.attempt
SET r.outcome = v.outcome, r.error = v.error_text, r.finished_at = {now}
WHERE r.outcome = 'running'`),
		},
		RunsBefore: r.Replace(`SELECT {runcols} FROM {runs}
WHERE job_id = (SELECT id FROM {jobs} WHERE name = ?) AND (scheduled_for, attempt) < (?, ?)
ORDER BY scheduled_for DESC, attempt DESC LIMIT ?`),
		Runs: r.Replace(`SELECT {runcols} FROM {runs}
WHERE job_id = (SELECT id FROM {jobs} WHERE name = ?) ORDER BY scheduled_for DESC, attempt DESC LIMIT ?`),
		Stats: r.Replace(`SELECT COUNT(*), COALESCE(SUM(paused), 0),
	COALESCE(SUM(paused = 0 AND next_run_at <= {now}), 0),
	COALESCE(SUM(locked_by IS NOT NULL), 0) FROM {jobs}`),
		PruneRuns: r.Replace(`DELETE FROM {runs} WHERE finished_at < ` + plusMS(now, "-?")),
		DueWindow: r.Replace(`SELECT id, GREATEST(next_run_at, COALESCE(not_before, next_run_at)), last_modified_at, {now} FROM {jobs}
WHERE paused = 0 AND next_run_at IS NOT NULL AND next_run_at < ` + plusMS(now, "?") + `
ORDER BY next_run_at, id LIMIT ?`),
		// The due index's first entry past now: a claim-mode worker sleeps
		// until then rather than a whole poll interval.
		NextDue: r.Replace(`SELECT TIMESTAMPDIFF(MICROSECOND, n.now, MIN(j.next_run_at)) / 1000.0
FROM {jobs} j, (SELECT {now} AS now) n WHERE j.paused = 0 AND j.next_run_at > n.now`),
		Changed: r.Replace(`SELECT id, paused, GREATEST(next_run_at, COALESCE(not_before, next_run_at)), last_modified_at FROM {jobs}
WHERE (last_modified_at > ? OR (last_modified_at = ? AND id > ?)) AND next_run_at IS NOT NULL
ORDER BY last_modified_at, id LIMIT ?`),
	})))
}

// addedColumns are the jobs table's columns newer than its first version:
// part of CREATE TABLE for a new schema, added to an older one by
// sqlstore.AddColumns (sqlstore.Column).
var addedColumns = [][2]string{
	{"pause_reason", "text"},
	{"regular_next_at", "datetime(6)"},
	{"breaker_failures", "int NOT NULL DEFAULT 0"},
	{"breaker_cool_down_ms", "bigint NOT NULL DEFAULT 0"},
	{"breaker_count", "int NOT NULL DEFAULT 0"},
	{"breaker_opened_at", "datetime(6)"},
	{"breaker_changed_at", "datetime(6)"},
}
