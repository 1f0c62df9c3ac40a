package mysql

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// withOccurrences adds the in-flight occurrence table of overlap allow jobs
// (sqlstore.OccurrenceQueries) to the scheduler's statements: its CREATE
// statement after the others. A statement that uses an argument twice
// reads its arguments once, into a derived table p (positional ?).
func withOccurrences(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	const lock = `job_id = ? AND scheduled_for = ? AND locked_by = ? AND lock_epoch = ?`
	r := strings.NewReplacer("{occ}", prefix+"_occurrences", "{jobs}", prefix+"_jobs", "{runs}", prefix+"_runs",
		"{leases}", prefix+"_leases", "{now}", now, "{options}", tableOptions, "{lock}", lock,
		// As a job claim: unlocked and past its backoff, stale, orphaned
		// by a worker lease gone, or a leader's older term's (p.le: the
		// stored lease epoch).
		"{claimable}", `j.paused = 0 AND (
	(o.locked_by IS NULL AND (o.not_before IS NULL OR o.not_before <= {now}))
	OR (o.locked_by IS NOT NULL AND `+plusMS("o.locked_at", "j.lock_timeout_ms")+` < {now})
	OR (o.locked_by IS NOT NULL AND o.lock_lease_epoch < 0 AND NOT EXISTS (SELECT 1 FROM {leases} wl
		WHERE wl.lease_name = CONCAT('`+sqlstore.WorkerLeasePrefix+`', o.locked_by) AND wl.lease_epoch = -o.lock_lease_epoch AND wl.expires_at > {now}))
	OR (o.locked_by IS NOT NULL AND p.le > 0 AND o.lock_lease_epoch > 0 AND o.lock_lease_epoch < p.le))`,
		// A write under the lock always changes the row (clientFoundRows
		// is off: an unchanged row counts as none, a lost lock).
		"{touch}", `locked_at = GREATEST({now}, locked_at + INTERVAL 1 MICROSECOND)`)
	// Two passes: {claimable} and {touch} hold other names.
	rr := func(s string) string { return r.Replace(r.Replace(s)) }
	q.Migrations = append(q.Migrations, rr(`CREATE TABLE IF NOT EXISTS {occ} (
	job_id           bigint       NOT NULL,
	scheduled_for    datetime(6)  NOT NULL,
	job_name         varchar(128) NOT NULL,
	attempt          int          NOT NULL DEFAULT 0,
	locked_by        varchar(128) NULL,
	locked_at        datetime(6)  NULL,
	lock_epoch       bigint       NOT NULL,
	lock_lease_epoch bigint       NOT NULL DEFAULT 0,
	not_before       datetime(6)  NULL,
	created_at       datetime(6)  NOT NULL,
	PRIMARY KEY (job_id, scheduled_for)
) {options}`))
	q.Occurrences = sqlstore.OccurrenceQueries{
		Insert: rr(`INSERT INTO {occ} (job_id, job_name, scheduled_for, attempt, locked_by, locked_at, lock_epoch, lock_lease_epoch, created_at)
SELECT p.job_id, p.job_name, p.sf, 0, p.holder, {now}, p.ep, p.le, {now}
FROM (SELECT ? AS job_id, ? AS job_name, CAST(? AS datetime(6)) AS sf, ? AS holder, ? AS ep, ? AS le, ? AS max_c) p
WHERE p.max_c = 0 OR (SELECT COUNT(*) FROM {occ} c WHERE c.job_id = p.job_id) < p.max_c`),
		Candidates: rr(`SELECT o.job_id, o.job_name, o.scheduled_for, o.lock_epoch, o.locked_by IS NOT NULL
FROM (SELECT ? AS le) p CROSS JOIN {occ} o JOIN {jobs} j ON j.id = o.job_id
WHERE {claimable}
ORDER BY o.scheduled_for LIMIT ?`),
		Claim: rr(`UPDATE (SELECT ? AS holder, ? AS le, ? AS job_id, CAST(? AS datetime(6)) AS sf, ? AS ep) p
JOIN {occ} o ON o.job_id = p.job_id AND o.scheduled_for = p.sf AND o.lock_epoch = p.ep
JOIN {jobs} j ON j.id = o.job_id
SET o.locked_by = p.holder, o.locked_at = {now}, o.lock_epoch = o.lock_epoch + 1, o.lock_lease_epoch = p.le
WHERE {claimable}`),
		Read:  rr(`SELECT attempt, lock_epoch, {now} FROM {occ} WHERE job_id = ? AND scheduled_for = ?`),
		Start: rr(`UPDATE {occ} SET attempt = ?, {touch} WHERE {lock}`),
		AbandonRunning: rr(`UPDATE {runs} SET outcome = 'abandoned', finished_at = {now},
	error = 'the executing instance stopped heartbeating its lock'
WHERE job_id = ? AND scheduled_for = ? AND outcome = 'running'`),
		Heartbeat: rr(`UPDATE {occ} SET {touch} WHERE {lock}`),
		Release: rr(`UPDATE {occ} SET locked_by = NULL, locked_at = NULL, lock_lease_epoch = 0, attempt = ?,
	not_before = ` + plusMS(now, "?") + ` WHERE {lock}`),
		Delete:    rr(`DELETE FROM {occ} WHERE {lock}`),
		DeleteJob: rr(`DELETE FROM {occ} WHERE job_id = ?`),
		SetBreaker: rr(`UPDATE {jobs} SET breaker_count = ?, breaker_opened_at = IF(? = 1, {now}, NULL),
	breaker_changed_at = IF(? = 1, {now}, breaker_changed_at),
	last_modified_at = GREATEST({now}, last_modified_at + INTERVAL 1 MICROSECOND)
WHERE id = ?`),
		Count: rr(`SELECT COUNT(*) FROM {occ} WHERE job_id = ?`),
	}
	return q
}
