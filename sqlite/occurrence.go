package sqlite

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// withOccurrences adds the in-flight occurrence table of overlap allow jobs
// (sqlstore.OccurrenceQueries) to the scheduler's statements: its CREATE
// statement after the others.
func withOccurrences(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	const lock = `job_id = ?%1 AND scheduled_for = ?%2 AND locked_by = ?%3 AND lock_epoch = ?%4`
	// lockFrom numbers the lock's four placeholders from first (1 to 3).
	lockFrom := func(first int) string {
		out := lock
		for i := 1; i <= 4; i++ {
			out = strings.ReplaceAll(out, "?%"+string(rune('0'+i)), "?"+string(rune('0'+first+i-1)))
		}
		return out
	}
	// As a job claim: unlocked and past its backoff, stale, orphaned by a
	// worker lease gone, or a leader's older term's ({le}: the stored lease
	// epoch).
	claimable := `j.paused = 0 AND (
	(o.locked_by IS NULL AND (o.not_before IS NULL OR o.not_before <= ` + now + `))
	OR (o.locked_by IS NOT NULL AND ` + nowFrom("o.locked_at", "j.lock_timeout_ms") + ` < ` + now + `)
	OR (o.locked_by IS NOT NULL AND o.lock_lease_epoch < 0 AND NOT EXISTS (SELECT 1 FROM ` + prefix + `_leases wl
		WHERE wl.lease_name = '` + sqlstore.WorkerLeasePrefix + `' || o.locked_by AND wl.lease_epoch = -o.lock_lease_epoch AND wl.expires_at > ` + now + `))
	OR (o.locked_by IS NOT NULL AND {le} > 0 AND o.lock_lease_epoch > 0 AND o.lock_lease_epoch < {le}))`
	r := strings.NewReplacer("{occ}", prefix+"_occurrences", "{jobs}", prefix+"_jobs", "{runs}", prefix+"_runs", "{now}", now)
	q.Migrations = append(q.Migrations, r.Replace(`CREATE TABLE IF NOT EXISTS {occ} (
	job_id           INTEGER NOT NULL,
	scheduled_for    TEXT    NOT NULL,
	job_name         TEXT    NOT NULL,
	attempt          INTEGER NOT NULL DEFAULT 0,
	locked_by        TEXT,
	locked_at        TEXT,
	lock_epoch       INTEGER NOT NULL,
	lock_lease_epoch INTEGER NOT NULL DEFAULT 0,
	not_before       TEXT,
	created_at       TEXT    NOT NULL,
	PRIMARY KEY (job_id, scheduled_for)
)`))
	q.Occurrences = sqlstore.OccurrenceQueries{
		Insert: r.Replace(`INSERT INTO {occ} (job_id, job_name, scheduled_for, attempt, locked_by, locked_at, lock_epoch, lock_lease_epoch, created_at)
SELECT ?1, ?2, ?3, 0, ?4, {now}, ?5, ?6, {now}
WHERE ?7 = 0 OR (SELECT count(*) FROM {occ} WHERE job_id = ?1) < ?7`),
		Candidates: r.Replace(`SELECT o.job_id, o.job_name, o.scheduled_for, o.lock_epoch, o.locked_by IS NOT NULL
FROM {occ} o JOIN {jobs} j ON j.id = o.job_id
WHERE ` + strings.ReplaceAll(claimable, "{le}", "?1") + `
ORDER BY o.scheduled_for LIMIT ?2`),
		Claim: r.Replace(`UPDATE {occ} AS o SET locked_by = ?1, locked_at = {now}, lock_epoch = o.lock_epoch + 1, lock_lease_epoch = ?2
WHERE o.job_id = ?3 AND o.scheduled_for = ?4 AND o.lock_epoch = ?5
  AND EXISTS (SELECT 1 FROM {jobs} j WHERE j.id = o.job_id AND ` + strings.ReplaceAll(claimable, "{le}", "?2") + `)`),
		Read:  r.Replace(`SELECT attempt, lock_epoch, {now} FROM {occ} WHERE job_id = ?1 AND scheduled_for = ?2`),
		Start: r.Replace(`UPDATE {occ} SET attempt = ?1, locked_at = {now} WHERE ` + lockFrom(2)),
		AbandonRunning: r.Replace(`UPDATE {runs} SET outcome = 'abandoned', finished_at = {now},
	error = 'the executing instance stopped heartbeating its lock'
WHERE job_id = ?1 AND scheduled_for = ?2 AND outcome = 'running'`),
		Heartbeat: r.Replace(`UPDATE {occ} SET locked_at = {now} WHERE ` + lockFrom(1)),
		Release: r.Replace(`UPDATE {occ} SET locked_by = NULL, locked_at = NULL, lock_lease_epoch = 0, attempt = ?1,
	not_before = ` + nowPlus("?2") + ` WHERE ` + lockFrom(3)),
		Delete:    r.Replace(`DELETE FROM {occ} WHERE ` + lockFrom(1)),
		DeleteJob: r.Replace(`DELETE FROM {occ} WHERE job_id = ?1`),
		SetBreaker: r.Replace(`UPDATE {jobs} SET breaker_count = ?1, breaker_opened_at = CASE WHEN ?2 = 1 THEN {now} END,
	breaker_changed_at = CASE WHEN ?3 = 1 THEN {now} ELSE breaker_changed_at END
WHERE id = ?4`),
		Count: r.Replace(`SELECT count(*) FROM {occ} WHERE job_id = ?1`),
	}
	return q
}
