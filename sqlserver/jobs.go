package sqlserver

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// qualify prefixes every column of a comma-separated list (which may span
// lines) with table, e.g. "inserted.": OUTPUT admits no bare column names.
func qualify(table, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = table + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

// jobQueries returns the scheduler's statements for the table prefix.
func jobQueries(prefix string) sqlstore.JobQueries {
	jobs, runs := prefix+"_jobs", prefix+"_runs"
	stale := addMS("q.lock_timeout_ms", "q.locked_at")
	r := strings.NewReplacer(
		"{jobs}", quote(jobs), "{runs}", quote(runs), "{leases}", quote(prefix+"_leases"),
		"{jobs_pk}", quote(jobs+"_pk"), "{jobs_name}", quote(jobs+"_name"),
		"{runs_pk}", quote(runs+"_pk"), "{runs_attempt}", quote(runs+"_attempt"),
		"{cols}", sqlstore.JobColumns, "{icols}", qualify("inserted.", sqlstore.JobColumns),
		"{runcols}", sqlstore.RunColumns, "{bin}", binary, "{n}", nowTable,
		"{effective}", "CASE WHEN not_before > next_run_at THEN not_before ELSE next_run_at END",
		"{added}", sqlstore.ColumnsDDL(addedColumns))
	// index returns an idempotent CREATE INDEX; the object name of an index
	// is per table.
	index := func(table, name, def string) string {
		return "IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'" + quote(table) + "', N'U') AND name = N'" + name + "')\n" +
			strings.ReplaceAll(def, "{name}", quote(name))
	}
	return withOccurrences(prefix, withCheckpoints(prefix, withOutput(prefix, sqlstore.JobQueries{
		Migrations: []string{
			r.Replace(`IF OBJECT_ID(N'{jobs}', N'U') IS NULL
CREATE TABLE {jobs} (
	id                    bigint IDENTITY(1,1) NOT NULL,
	name                  nvarchar(128) {bin} NOT NULL,
	client_key            nvarchar(256) {bin} NULL,
	spec_hash             nvarchar(64)  NOT NULL,
	schedule              nvarchar(max) NOT NULL,
	action                nvarchar(max) NOT NULL,
	missed_runs           nvarchar(16)  NOT NULL,
	skip_if_older_than_ms bigint        NOT NULL DEFAULT 0,
	max_attempts          int           NOT NULL,
	backoff_ms            bigint        NOT NULL,
	lock_timeout_ms       bigint        NOT NULL,
	paused                bit           NOT NULL DEFAULT 0,
	next_run_at           datetime2(7)  NULL,
	last_run_at           datetime2(7)  NULL,
	attempt               int           NOT NULL DEFAULT 0,
	locked_by             nvarchar(128) {bin} NULL,
	locked_at             datetime2(7)  NULL,
	lock_epoch            bigint        NOT NULL DEFAULT 0,
	lock_lease_epoch      bigint        NOT NULL DEFAULT 0,
	not_before            datetime2(7)  NULL,
	created_at            datetime2(7)  NOT NULL,
	last_modified_at      datetime2(7)  NOT NULL,
	{added},
	CONSTRAINT {jobs_pk} PRIMARY KEY (id),
	CONSTRAINT {jobs_name} UNIQUE (name)
)`),
			// A UNIQUE constraint would admit a single NULL: the client key
			// is unique among the jobs that have one.
			r.Replace(index(jobs, jobs+"_key", `CREATE UNIQUE INDEX {name} ON {jobs} (client_key) WHERE client_key IS NOT NULL`)),
			r.Replace(index(jobs, jobs+"_due", `CREATE INDEX {name} ON {jobs} (next_run_at, id) WHERE paused = 0 AND next_run_at IS NOT NULL`)),
			r.Replace(index(jobs, jobs+"_modified", `CREATE INDEX {name} ON {jobs} (last_modified_at, id)`)),
			r.Replace(`IF OBJECT_ID(N'{runs}', N'U') IS NULL
CREATE TABLE {runs} (
	id            bigint IDENTITY(1,1) NOT NULL,
	job_id        bigint        NOT NULL,
	job_name      nvarchar(128) {bin} NOT NULL,
	scheduled_for datetime2(7)  NOT NULL,
	attempt       int           NOT NULL,
	holder_id     nvarchar(128) {bin} NOT NULL,
	epoch         bigint        NOT NULL,
	started_at    datetime2(7)  NOT NULL,
	finished_at   datetime2(7)  NULL,
	outcome       nvarchar(16)  NOT NULL,
	error         nvarchar(max) NULL,
	CONSTRAINT {runs_pk} PRIMARY KEY (id),
	CONSTRAINT {runs_attempt} UNIQUE (job_id, scheduled_for, attempt)
)`),
			r.Replace(index(runs, runs+"_running", `CREATE INDEX {name} ON {runs} (job_id) WHERE outcome = N'running'`)),
			r.Replace(index(runs, runs+"_finished", `CREATE INDEX {name} ON {runs} (finished_at)`)),
		},
		Now: `SELECT SYSUTCDATETIME()`,
		// The key-range locks (UPDLOCK, HOLDLOCK) on the name and on the
		// client key make a concurrent insert of the same name or key wait
		// and then find it, as ON CONFLICT DO NOTHING does. "client_key IS
		// NOT NULL" repeats the filter of the key's index so that the
		// optimizer seeks it.
		InsertJob: r.Replace(`INSERT INTO {jobs} (name, client_key, spec_hash, schedule, action, missed_runs, skip_if_older_than_ms,
	max_attempts, backoff_ms, lock_timeout_ms, paused, next_run_at, breaker_failures, breaker_cool_down_ms, created_at, last_modified_at)
OUTPUT {icols}
SELECT @p1, @p2, @p3, @p4, @p5, @p6, @p7, @p8, @p9, @p10, @p11, @p12, @p13, @p14, n.now, n.now
FROM {n} AS n
WHERE NOT EXISTS (SELECT 1 FROM {jobs} WITH (UPDLOCK, HOLDLOCK) WHERE name = @p1)
  AND NOT EXISTS (SELECT 1 FROM {jobs} WITH (UPDLOCK, HOLDLOCK) WHERE client_key = @p2 AND client_key IS NOT NULL)`),
		JobByName: r.Replace(`SELECT {cols} FROM {jobs} WHERE name = @p1`),
		JobByKey:  r.Replace(`SELECT {cols} FROM {jobs} WHERE client_key = @p1 AND client_key IS NOT NULL`),
		ListJobs:  r.Replace(`SELECT TOP (@p2) {cols} FROM {jobs} WHERE name > @p1 ORDER BY name`),
		DeleteJob: r.Replace(`DELETE FROM {jobs} WHERE name = @p1`),
		SetPaused: r.Replace(`UPDATE {jobs} SET paused = @p2, pause_reason = @p3, last_modified_at = SYSUTCDATETIME()
OUTPUT {icols}
WHERE name = @p1`),
		PauseLike: r.Replace(`UPDATE {jobs} SET paused = @p1, pause_reason = @p2, last_modified_at = SYSUTCDATETIME()
WHERE name LIKE @p3 ESCAPE '!'`),
		Trigger: r.Replace(`UPDATE j SET
	regular_next_at = CASE WHEN j.regular_next_at > n.now THEN j.regular_next_at WHEN j.next_run_at > n.now THEN j.next_run_at END,
	attempt = CASE WHEN j.next_run_at <= n.now THEN j.attempt ELSE 0 END,
	next_run_at = CASE WHEN j.next_run_at <= n.now THEN j.next_run_at ELSE n.now END,
	not_before = NULL, last_modified_at = n.now
OUTPUT {icols}
FROM {jobs} AS j CROSS JOIN {n} AS n
WHERE j.name = @p1 AND j.paused = 0 AND j.locked_by IS NULL`),
		SetBreaker: r.Replace(`UPDATE j SET breaker_count = @p1, breaker_opened_at = CASE WHEN @p2 = 1 THEN n.now END,
	breaker_changed_at = CASE WHEN @p3 = 1 THEN n.now ELSE j.breaker_changed_at END
FROM {jobs} AS j CROSS JOIN {n} AS n
WHERE j.id = @p4 AND j.locked_by = @p5 AND j.lock_epoch = @p6`),
		// The queue idiom: candidates read with update locks, skipping rows
		// another claimer has locked (READPAST), the oldest first; the
		// update locks hold them until this statement writes them, so each
		// due job goes to exactly one claimer. One clock reading (c.now)
		// decides and stamps.
		ClaimDue: r.Replace(`WITH c AS (
	SELECT TOP (@p2) q.id, n.now
	FROM {jobs} AS q WITH (UPDLOCK, READPAST, ROWLOCK)
	CROSS JOIN {n} AS n
	WHERE q.paused = 0 AND q.next_run_at <= n.now
	  AND (q.not_before IS NULL OR q.not_before <= n.now)
	  AND (q.locked_by IS NULL OR ` + stale + ` < n.now
	       OR (q.lock_lease_epoch < 0 AND NOT EXISTS (SELECT 1 FROM {leases} AS wl WHERE wl.lease_name = N'` + sqlstore.WorkerLeasePrefix + `' + q.locked_by
	           AND wl.lease_epoch = -q.lock_lease_epoch AND wl.expires_at > n.now)))
	ORDER BY q.next_run_at, q.id
)
UPDATE j SET locked_by = @p1, locked_at = c.now, lock_epoch = j.lock_epoch + 1,
	lock_lease_epoch = -@p3
OUTPUT {icols}, inserted.locked_at
FROM c JOIN {jobs} AS j ON j.id = c.id`),
		ClaimJob: r.Replace(`UPDATE q SET locked_by = @p2, locked_at = n.now, lock_epoch = q.lock_epoch + 1,
	lock_lease_epoch = @p3
OUTPUT {icols}, inserted.locked_at
FROM {jobs} AS q WITH (UPDLOCK, ROWLOCK)
CROSS JOIN {n} AS n
WHERE q.id = @p1 AND q.paused = 0 AND q.next_run_at <= n.now
  AND (q.not_before IS NULL OR q.not_before <= n.now)
  AND (q.locked_by IS NULL OR ` + stale + ` < n.now OR q.lock_lease_epoch < @p3
       OR q.lock_lease_epoch = @p3 AND q.locked_by = @p2)`),
		AbandonDeleted: r.Replace(`UPDATE {runs} SET outcome = N'abandoned', finished_at = SYSUTCDATETIME(), error = N'job deleted while running'
WHERE job_id = @p1 AND outcome = N'running'`),
		AbandonRunning: r.Replace(`UPDATE {runs} SET outcome = N'abandoned', finished_at = SYSUTCDATETIME(),
	error = N'the executing instance stopped heartbeating its lock'
WHERE job_id = @p1 AND scheduled_for = (SELECT next_run_at FROM {jobs} WHERE id = @p1) AND outcome = N'running'`),
		StartJob: r.Replace(`UPDATE j SET next_run_at = @p1, attempt = @p2, locked_at = n.now, last_modified_at = n.now
FROM {jobs} AS j CROSS JOIN {n} AS n
WHERE j.id = @p3 AND j.locked_by = @p4 AND j.lock_epoch = @p5`),
		InsertRun: r.Replace(`INSERT INTO {runs} (job_id, job_name, scheduled_for, attempt, holder_id, epoch, started_at, outcome)
VALUES (@p1, @p2, @p3, @p4, @p5, @p6, SYSUTCDATETIME(), N'running')`),
		OwnClaims: r.Replace(`SELECT id, lock_epoch, next_run_at, attempt FROM {jobs} WHERE locked_by = @p1 AND lock_lease_epoch = @p2`),
		Heartbeat: r.Replace(`UPDATE {jobs} SET locked_at = SYSUTCDATETIME() WHERE id = @p1 AND locked_by = @p2 AND lock_epoch = @p3`),
		FinishRun: r.Replace(`UPDATE {runs} SET outcome = @p1, error = @p2, finished_at = SYSUTCDATETIME()
WHERE job_id = @p3 AND scheduled_for = @p4 AND attempt = @p5 AND outcome = N'running'`),
		ReleaseJob: r.Replace(`UPDATE j SET locked_by = NULL, locked_at = NULL, lock_lease_epoch = 0,
	next_run_at = @p1, attempt = @p2, not_before = ` + addMS(msParam("@p3"), "n.now") + `,
	last_run_at = n.now, last_modified_at = n.now
FROM {jobs} AS j CROSS JOIN {n} AS n
WHERE j.id = @p4 AND j.locked_by = @p5 AND j.lock_epoch = @p6`),
		RunsBefore: r.Replace(`SELECT TOP (@p4) {runcols} FROM {runs}
WHERE job_id = (SELECT id FROM {jobs} WHERE name = @p1) AND (scheduled_for < @p2 OR scheduled_for = @p2 AND attempt < @p3)
ORDER BY scheduled_for DESC, attempt DESC`),
		Runs: r.Replace(`SELECT TOP (@p2) {runcols} FROM {runs}
WHERE job_id = (SELECT id FROM {jobs} WHERE name = @p1) ORDER BY scheduled_for DESC, attempt DESC`),
		Stats: r.Replace(`SELECT COUNT_BIG(*),
	COALESCE(SUM(CASE WHEN paused = 1 THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN paused = 0 AND next_run_at <= SYSUTCDATETIME() THEN 1 ELSE 0 END), 0),
	COALESCE(SUM(CASE WHEN locked_by IS NOT NULL THEN 1 ELSE 0 END), 0)
FROM {jobs}`),
		PruneRuns: r.Replace(`DELETE FROM {runs} WHERE finished_at < ` + addMS("-"+msParam("@p1"), "SYSUTCDATETIME()")),
		DueWindow: r.Replace(`SELECT TOP (@p2) id, {effective}, last_modified_at, n.now
FROM {jobs} CROSS JOIN {n} AS n
WHERE paused = 0 AND next_run_at IS NOT NULL AND next_run_at < ` + addMS(msParam("@p1"), "n.now") + `
ORDER BY next_run_at, id`),
		Changed: r.Replace(`SELECT TOP (@p4) id, paused, {effective}, last_modified_at FROM {jobs}
WHERE (last_modified_at > @p1 OR (last_modified_at = @p2 AND id > @p3)) AND next_run_at IS NOT NULL
ORDER BY last_modified_at, id`),
	})))
}

// addedColumns are the jobs table's columns newer than its first version:
// part of CREATE TABLE for a new schema, added to an older one by
// sqlstore.AddColumns (sqlstore.Column).
var addedColumns = [][2]string{
	{"pause_reason", "nvarchar(max) NULL"},
	{"regular_next_at", "datetime2(7) NULL"},
	{"breaker_failures", "int NOT NULL DEFAULT 0"},
	{"breaker_cool_down_ms", "bigint NOT NULL DEFAULT 0"},
	{"breaker_count", "int NOT NULL DEFAULT 0"},
	{"breaker_opened_at", "datetime2(7) NULL"},
	{"breaker_changed_at", "datetime2(7) NULL"},
}
