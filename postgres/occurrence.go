package postgres

import (
	"fmt"
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// withOccurrences adds the in-flight occurrence table of overlap allow jobs
// (sqlstore.OccurrenceQueries) to the scheduler's statements: its CREATE
// statement after the others.
func withOccurrences(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	// As a job claim: due and unlocked, stale, orphaned by a worker lease
	// gone, or a leader's older term's ({le}: the stored lease epoch); and
	// a claim under a term of an older timeline is refused (timeline.go).
	claimable := `NOT j.paused AND ({le} = 0 OR abs({le}) >= n.tl) AND (
	(o.locked_by IS NULL AND (o.not_before IS NULL OR o.not_before <= n.now))
	OR (o.locked_by IS NOT NULL AND o.locked_at + j.lock_timeout_ms * interval '1 millisecond' < n.now)
	OR (o.locked_by IS NOT NULL AND o.lock_lease_epoch < 0 AND NOT EXISTS (SELECT 1 FROM ` + prefix + `_leases wl
		WHERE wl.lease_name = '` + sqlstore.WorkerLeasePrefix + `' || o.locked_by AND wl.lease_epoch = -o.lock_lease_epoch AND wl.expires_at > n.now))
	OR (o.locked_by IS NOT NULL AND {le} > 0 AND o.lock_lease_epoch > 0 AND o.lock_lease_epoch < {le}))`
	r := strings.NewReplacer("{occ}", prefix+"_occurrences", "{jobs}", prefix+"_jobs", "{runs}", prefix+"_runs",
		"{claimnow}", "SELECT clock_timestamp() AS now, "+timelineBase+" AS tl")
	// lock is the lock's condition, its four placeholders from first.
	lock := func(first int) string {
		return fmt.Sprintf("job_id = $%d AND scheduled_for = $%d AND locked_by = $%d AND lock_epoch = $%d", first, first+1, first+2, first+3)
	}
	q.Migrations = append(q.Migrations, r.Replace(`CREATE TABLE IF NOT EXISTS {occ} (
	job_id           bigint       NOT NULL,
	scheduled_for    timestamptz  NOT NULL,
	job_name         varchar(128) NOT NULL,
	attempt          integer      NOT NULL DEFAULT 0,
	locked_by        varchar(128),
	locked_at        timestamptz,
	lock_epoch       bigint       NOT NULL,
	lock_lease_epoch bigint       NOT NULL DEFAULT 0,
	not_before       timestamptz,
	created_at       timestamptz  NOT NULL,
	PRIMARY KEY (job_id, scheduled_for)
)`))
	q.Occurrences = sqlstore.OccurrenceQueries{
		Insert: r.Replace(`INSERT INTO {occ} (job_id, job_name, scheduled_for, attempt, locked_by, locked_at, lock_epoch, lock_lease_epoch, created_at)
SELECT $1::bigint, $2::varchar, $3::timestamptz, 0, $4::varchar, n.now, $5::bigint, $6::bigint, n.now FROM (SELECT clock_timestamp() AS now) n
WHERE $7::int = 0 OR (SELECT count(*) FROM {occ} WHERE job_id = $1::bigint) < $7::int`),
		Candidates: r.Replace(`SELECT o.job_id, o.job_name, o.scheduled_for, o.lock_epoch, o.locked_by IS NOT NULL
FROM {occ} o JOIN {jobs} j ON j.id = o.job_id, ({claimnow}) n
WHERE ` + strings.ReplaceAll(claimable, "{le}", "$1::bigint") + `
ORDER BY o.scheduled_for LIMIT $2`),
		Claim: r.Replace(`UPDATE {occ} o SET locked_by = $1, locked_at = n.now, lock_epoch = GREATEST(o.lock_epoch + 1, n.tl | 1), lock_lease_epoch = $2
FROM {jobs} j, ({claimnow}) n
WHERE o.job_id = $3 AND o.scheduled_for = $4 AND o.lock_epoch = $5 AND j.id = o.job_id AND ` + strings.ReplaceAll(claimable, "{le}", "$2::bigint")),
		Read:  r.Replace(`SELECT attempt, lock_epoch, clock_timestamp() FROM {occ} WHERE job_id = $1 AND scheduled_for = $2`),
		Start: r.Replace(`UPDATE {occ} SET attempt = $1, locked_at = clock_timestamp() WHERE ` + lock(2)),
		AbandonRunning: r.Replace(`UPDATE {runs} SET outcome = 'abandoned', finished_at = clock_timestamp(),
	error = 'the executing instance stopped heartbeating its lock'
WHERE job_id = $1 AND scheduled_for = $2 AND outcome = 'running'`),
		Heartbeat: r.Replace(`UPDATE {occ} SET locked_at = clock_timestamp() WHERE ` + lock(1)),
		Release: r.Replace(`UPDATE {occ} SET locked_by = NULL, locked_at = NULL, lock_lease_epoch = 0, attempt = $1,
	not_before = n.now + $2::bigint * interval '1 millisecond'
FROM (SELECT clock_timestamp() AS now) n WHERE ` + lock(3)),
		Delete:    r.Replace(`DELETE FROM {occ} WHERE ` + lock(1)),
		DeleteJob: r.Replace(`DELETE FROM {occ} WHERE job_id = $1`),
		SetBreaker: r.Replace(`UPDATE {jobs} SET breaker_count = $1, breaker_opened_at = CASE WHEN $2::int = 1 THEN n.now END,
	breaker_changed_at = CASE WHEN $3::int = 1 THEN n.now ELSE breaker_changed_at END
FROM (SELECT clock_timestamp() AS now) n
WHERE id = $4`),
		Count: r.Replace(`SELECT count(*) FROM {occ} WHERE job_id = $1`),
	}
	return q
}
