package sqlite

import (
	"errors"
	"strings"
	"time"

	"github.com/sqlease/sqlease/sqlstore"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// timeLayout is how times are stored: UTC text at SQLite's millisecond
// resolution, so that text comparison is time comparison.
const timeLayout = "2006-01-02 15:04:05.000"

// timeArg formats a time parameter in the stored form.
func timeArg(t time.Time) any { return t.UTC().Format(timeLayout) }

// jobQueries returns the scheduler's statements for the table prefix.
func jobQueries(prefix string) sqlstore.JobQueries {
	// The batch start (StartRunIf) counts a started attempt in the ledger
	// only, so every read of a job takes its attempt count from both (one
	// probe of the ledger's unique index), as on PostgreSQL.
	cols := strings.Replace(sqlstore.JobColumns, "attempt,", `max(attempt, COALESCE((SELECT max(r.attempt) FROM `+prefix+`_runs r
	WHERE r.job_id = `+prefix+`_jobs.id AND r.scheduled_for = `+prefix+`_jobs.next_run_at), 0)),`, 1)
	r := strings.NewReplacer("{jobs}", prefix+"_jobs", "{runs}", prefix+"_runs", "{cols}", cols,
		"{runcols}", sqlstore.RunColumns, "{now}", now, "{leases}", prefix+"_leases",
		"{added}", sqlstore.ColumnsDDL(addedColumns),
		// A RETURNING clause sees only the new row: whether a claimed job
		// was locked before (a reclaim, whose crashed run must be marked
		// abandoned) is written to a column of its own to be returned.
		"{claimcols}", `lock_reclaimed = locked_by IS NOT NULL`)
	// A job claim mode may take: due, and unlocked, stale, or claimed
	// under a worker lease that is gone (ClaimDue and ClaimPeek).
	claimable := `paused = 0 AND next_run_at <= {now}
	  AND (not_before IS NULL OR not_before <= {now})
	  AND (locked_by IS NULL OR ` + nowFrom("locked_at", "lock_timeout_ms") + ` < {now}
	       OR (j.lock_lease_epoch < 0 AND NOT EXISTS (SELECT 1 FROM {leases} wl WHERE wl.lease_name = '` + sqlstore.WorkerLeasePrefix + `' || j.locked_by
	           AND wl.lease_epoch = -j.lock_lease_epoch AND wl.expires_at > {now})))`
	return withOccurrences(prefix, withCheckpoints(prefix, withOutput(prefix, sqlstore.JobQueries{
		Migrations: []string{
			r.Replace(`CREATE TABLE IF NOT EXISTS {jobs} (
	id                    INTEGER PRIMARY KEY AUTOINCREMENT,
	name                  TEXT    NOT NULL UNIQUE,
	client_key            TEXT    UNIQUE,
	spec_hash             TEXT    NOT NULL,
	schedule              TEXT    NOT NULL,
	action                TEXT    NOT NULL,
	missed_runs           TEXT    NOT NULL,
	skip_if_older_than_ms INTEGER NOT NULL DEFAULT 0,
	max_attempts          INTEGER NOT NULL,
	backoff_ms            INTEGER NOT NULL,
	lock_timeout_ms       INTEGER NOT NULL,
	paused                INTEGER NOT NULL DEFAULT 0,
	next_run_at           TEXT,
	last_run_at           TEXT,
	attempt               INTEGER NOT NULL DEFAULT 0,
	locked_by             TEXT,
	locked_at             TEXT,
	lock_epoch            INTEGER NOT NULL DEFAULT 0,
	lock_lease_epoch      INTEGER NOT NULL DEFAULT 0,
	lock_reclaimed        INTEGER NOT NULL DEFAULT 0,
	not_before            TEXT,
	created_at            TEXT    NOT NULL,
	last_modified_at      TEXT    NOT NULL,
	{added}
)`),
			r.Replace(`CREATE INDEX IF NOT EXISTS {jobs}_due ON {jobs} (next_run_at, id) WHERE paused = 0 AND next_run_at IS NOT NULL`),
			r.Replace(`CREATE INDEX IF NOT EXISTS {jobs}_modified ON {jobs} (last_modified_at, id)`),
			r.Replace(`CREATE TABLE IF NOT EXISTS {runs} (
	id            INTEGER PRIMARY KEY AUTOINCREMENT,
	job_id        INTEGER NOT NULL,
	job_name      TEXT    NOT NULL,
	scheduled_for TEXT    NOT NULL,
	attempt       INTEGER NOT NULL,
	holder_id     TEXT    NOT NULL,
	epoch         INTEGER NOT NULL,
	started_at    TEXT    NOT NULL,
	finished_at   TEXT,
	outcome       TEXT    NOT NULL,
	error         TEXT,
	UNIQUE (job_id, scheduled_for, attempt)
)`),
			r.Replace(`CREATE INDEX IF NOT EXISTS {runs}_running ON {runs} (job_id) WHERE outcome = 'running'`),
			r.Replace(`CREATE INDEX IF NOT EXISTS {runs}_finished ON {runs} (finished_at)`),
		},
		Now: `SELECT ` + now,
		InsertJob: r.Replace(`INSERT INTO {jobs} (name, client_key, spec_hash, schedule, action, missed_runs, skip_if_older_than_ms,
	max_attempts, backoff_ms, lock_timeout_ms, paused, next_run_at, breaker_failures, breaker_cool_down_ms, created_at, last_modified_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, {now}, {now})
ON CONFLICT DO NOTHING
RETURNING {cols}`),
		JobByName: r.Replace(`SELECT {cols} FROM {jobs} WHERE name = ?1`),
		JobByKey:  r.Replace(`SELECT {cols} FROM {jobs} WHERE client_key = ?1`),
		ListJobs:  r.Replace(`SELECT {cols} FROM {jobs} WHERE name > ?1 ORDER BY name LIMIT ?2`),
		DeleteJob: r.Replace(`DELETE FROM {jobs} WHERE name = ?1`),
		SetPaused: r.Replace(`UPDATE {jobs} SET paused = ?2, pause_reason = ?3, last_modified_at = {now} WHERE name = ?1 RETURNING {cols}`),
		PauseLike: r.Replace(`UPDATE {jobs} SET paused = ?1, pause_reason = ?2, last_modified_at = {now} WHERE name LIKE ?3 ESCAPE '!'`),
		Trigger: r.Replace(`UPDATE {jobs} SET
	regular_next_at = CASE WHEN regular_next_at > {now} THEN regular_next_at WHEN next_run_at > {now} THEN next_run_at END,
	attempt = CASE WHEN next_run_at <= {now} THEN attempt ELSE 0 END,
	next_run_at = CASE WHEN next_run_at <= {now} THEN next_run_at ELSE {now} END,
	not_before = NULL, last_modified_at = {now}
WHERE name = ?1 AND paused = 0 AND locked_by IS NULL RETURNING {cols}`),
		SetBreaker: r.Replace(`UPDATE {jobs} SET breaker_count = ?1, breaker_opened_at = CASE WHEN ?2 = 1 THEN {now} END,
	breaker_changed_at = CASE WHEN ?3 = 1 THEN {now} ELSE breaker_changed_at END
WHERE id = ?4 AND locked_by = ?5 AND lock_epoch = ?6`),
		ClaimDue: r.Replace(`UPDATE {jobs} SET locked_by = ?1, locked_at = {now}, lock_epoch = lock_epoch + 1,
	lock_lease_epoch = -?3, {claimcols}
WHERE id IN (
	SELECT id FROM {jobs} AS j
	WHERE ` + claimable + `
	ORDER BY next_run_at, id
	LIMIT ?2
)
RETURNING {cols}, {now}, lock_reclaimed`),
		ClaimDueReclaimed: true,
		// An UPDATE returns nothing when it claims nothing: a worker's
		// claim that may find none (its last was not full) reads first,
		// and learns the next due time in the same statement, which takes
		// the place of the idle poll's UPDATE (a read: no write lock, no
		// turn at the write gate). Both halves see one 'now'.
		ClaimPeek: r.Replace(`SELECT id, NULL FROM (SELECT id FROM {jobs} AS j WHERE ` + claimable + `
	ORDER BY next_run_at, id LIMIT ?1)
UNION ALL
SELECT NULL, (julianday(min(next_run_at)) - julianday({now})) * 86400000.0 FROM {jobs}
WHERE paused = 0 AND next_run_at > {now}`),
		ClaimJob: r.Replace(`UPDATE {jobs} SET locked_by = ?2, locked_at = {now}, lock_epoch = lock_epoch + 1,
	lock_lease_epoch = ?3, {claimcols}
WHERE id = ?1 AND paused = 0 AND next_run_at <= {now}
  AND (not_before IS NULL OR not_before <= {now})
  AND (locked_by IS NULL OR ` + nowFrom("locked_at", "lock_timeout_ms") + ` < {now} OR lock_lease_epoch < ?3
       OR lock_lease_epoch = ?3 AND locked_by = ?2)
RETURNING {cols}, {now}`),
		// ClaimJob for a JSON array of ids (Dialect.IDs). The transaction
		// holds the database's write lock: no row is locked by another.
		ClaimJobs: r.Replace(`UPDATE {jobs} SET locked_by = ?2, locked_at = {now}, lock_epoch = lock_epoch + 1,
	lock_lease_epoch = ?3, {claimcols}
WHERE id IN (SELECT value FROM json_each(?1)) AND paused = 0 AND next_run_at <= {now}
  AND (not_before IS NULL OR not_before <= {now})
  AND (locked_by IS NULL OR ` + nowFrom("locked_at", "lock_timeout_ms") + ` < {now} OR lock_lease_epoch < ?3
       OR lock_lease_epoch = ?3 AND locked_by = ?2)
RETURNING {cols}, {now}, lock_reclaimed`),
		// The WHERE clause also keeps the upsert apart from the SELECT for
		// the parser.
		StartRunIf: r.Replace(`INSERT INTO {runs} (job_id, job_name, scheduled_for, attempt, holder_id, epoch, started_at, outcome)
SELECT id, ?4, ?5, ?6, ?2, ?7, {now}, 'running' FROM {jobs} WHERE id = ?1 AND locked_by = ?2 AND lock_epoch = ?3
ON CONFLICT DO NOTHING`),
		AbandonDeleted: r.Replace(`UPDATE {runs} SET outcome = 'abandoned', finished_at = {now}, error = 'job deleted while running'
WHERE job_id = ?1 AND outcome = 'running'`),
		// Only the run of the locked job's occurrence: an overlap allow
		// job's other occurrences run under locks of their own.
		AbandonRunning: r.Replace(`UPDATE {runs} SET outcome = 'abandoned', finished_at = {now},
	error = 'the executing instance stopped heartbeating its lock'
WHERE job_id = ?1 AND scheduled_for = (SELECT next_run_at FROM {jobs} WHERE id = ?1) AND outcome = 'running'`),
		StartJob: r.Replace(`UPDATE {jobs} SET next_run_at = ?1, attempt = ?2, locked_at = {now}, last_modified_at = {now}
WHERE id = ?3 AND locked_by = ?4 AND lock_epoch = ?5`),
		InsertRun: r.Replace(`INSERT INTO {runs} (job_id, job_name, scheduled_for, attempt, holder_id, epoch, started_at, outcome)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, {now}, 'running')`),
		OwnClaims: r.Replace(`SELECT id, lock_epoch, next_run_at, attempt FROM {jobs} WHERE locked_by = ?1 AND lock_lease_epoch = ?2`),
		Heartbeat: r.Replace(`UPDATE {jobs} SET locked_at = {now} WHERE id = ?1 AND locked_by = ?2 AND lock_epoch = ?3`),
		FinishRun: r.Replace(`UPDATE {runs} SET outcome = ?1, error = ?2, finished_at = {now}
WHERE job_id = ?3 AND scheduled_for = ?4 AND attempt = ?5 AND outcome = 'running'`),
		ReleaseJob: r.Replace(`UPDATE {jobs} SET locked_by = NULL, locked_at = NULL, lock_lease_epoch = 0,
	next_run_at = ?1, attempt = ?2, not_before = ` + nowPlus("?3") + `,
	last_run_at = {now}, last_modified_at = {now}
WHERE id = ?4 AND locked_by = ?5 AND lock_epoch = ?6`),
		RunsBefore: r.Replace(`SELECT {runcols} FROM {runs}
WHERE job_id = (SELECT id FROM {jobs} WHERE name = ?1) AND (scheduled_for < ?2 OR scheduled_for = ?2 AND attempt < ?3)
ORDER BY scheduled_for DESC, attempt DESC LIMIT ?4`),
		Runs: r.Replace(`SELECT {runcols} FROM {runs}
WHERE job_id = (SELECT id FROM {jobs} WHERE name = ?1) ORDER BY scheduled_for DESC, attempt DESC LIMIT ?2`),
		Stats: r.Replace(`SELECT count(*), coalesce(sum(paused), 0),
	coalesce(sum(paused = 0 AND next_run_at <= {now}), 0),
	coalesce(sum(locked_by IS NOT NULL), 0) FROM {jobs}`),
		PruneRuns: r.Replace(`DELETE FROM {runs} WHERE finished_at < ` + nowPlus("-?1")),
		// The due index's first entry past now: a claim-mode worker sleeps
		// until then rather than a whole poll interval. julianday keeps
		// sub-millisecond precision for the span.
		NextDue: r.Replace(`SELECT (julianday(min(next_run_at)) - julianday({now})) * 86400000.0 FROM {jobs}
WHERE paused = 0 AND next_run_at > {now}`),
		DueWindow: r.Replace(`SELECT id, max(next_run_at, COALESCE(not_before, next_run_at)), last_modified_at, {now} FROM {jobs}
WHERE paused = 0 AND next_run_at IS NOT NULL AND next_run_at < ` + nowPlus("?1") + `
ORDER BY next_run_at, id LIMIT ?2`),
		// SQLite seeks an index by the row value's first column only: with
		// (last_modified_at, id) > (?, ?) every page re-scanned the rows of
		// its stamp, so a bulk insert sharing one stamp made a refresh
		// quadratic (140 s for a million rows). Two seeks instead: the rest
		// of the cursor's stamp, then the later stamps.
		Changed: r.Replace(`SELECT * FROM (SELECT id, paused, max(next_run_at, COALESCE(not_before, next_run_at)), last_modified_at FROM {jobs}
	WHERE last_modified_at = ?2 AND id > ?3 AND next_run_at IS NOT NULL ORDER BY id LIMIT ?4)
UNION ALL
SELECT * FROM (SELECT id, paused, max(next_run_at, COALESCE(not_before, next_run_at)), last_modified_at FROM {jobs}
	WHERE last_modified_at > ?1 AND next_run_at IS NOT NULL ORDER BY last_modified_at, id LIMIT ?4)
ORDER BY 4, 1 LIMIT ?4`),
	})))
}

// addedColumns are the jobs table's columns newer than its first version:
// part of CREATE TABLE for a new schema, added to an older one by
// sqlstore.AddColumns (sqlstore.Column).
var addedColumns = [][2]string{
	{"pause_reason", "TEXT"},
	{"regular_next_at", "TEXT"},
	{"breaker_failures", "INTEGER NOT NULL DEFAULT 0"},
	{"breaker_cool_down_ms", "INTEGER NOT NULL DEFAULT 0"},
	{"breaker_count", "INTEGER NOT NULL DEFAULT 0"},
	{"breaker_opened_at", "TEXT"},
	{"breaker_changed_at", "TEXT"},
}

// nowFrom adds a millisecond column to a time column.
func nowFrom(col, msCol string) string {
	return `strftime('%Y-%m-%d %H:%M:%f',` + col + `,(` + msCol + `/1000.0)||' seconds')`
}

// isUniqueViolation reports SQLITE_CONSTRAINT_UNIQUE / PRIMARYKEY.
func isUniqueViolation(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
}
