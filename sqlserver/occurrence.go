package sqlserver

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// withOccurrences adds the in-flight occurrence table of overlap allow jobs
// (sqlstore.OccurrenceQueries) to the scheduler's statements: its CREATE
// statement after the others. Every statement that reads the clock reads
// it once (n.now).
func withOccurrences(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	occ := prefix + "_occurrences"
	// lock is the lock's condition on o, its placeholders from @pN.
	lock := func(first string) string {
		r := strings.NewReplacer("{1}", "@p"+first, "{2}", "@p"+string(rune(first[0]+1)), "{3}", "@p"+string(rune(first[0]+2)), "{4}", "@p"+string(rune(first[0]+3)))
		return r.Replace(`o.job_id = {1} AND o.scheduled_for = {2} AND o.locked_by = {3} AND o.lock_epoch = {4}`)
	}
	// As a job claim: unlocked and past its backoff, stale, orphaned by a
	// worker lease gone, or a leader's older term's ({le}: the stored lease
	// epoch).
	claimable := `j.paused = 0 AND (
	(o.locked_by IS NULL AND (o.not_before IS NULL OR o.not_before <= n.now))
	OR (o.locked_by IS NOT NULL AND ` + addMS("j.lock_timeout_ms", "o.locked_at") + ` < n.now)
	OR (o.locked_by IS NOT NULL AND o.lock_lease_epoch < 0 AND NOT EXISTS (SELECT 1 FROM {leases} AS wl
		WHERE wl.lease_name = N'` + sqlstore.WorkerLeasePrefix + `' + o.locked_by AND wl.lease_epoch = -o.lock_lease_epoch AND wl.expires_at > n.now))
	OR (o.locked_by IS NOT NULL AND {le} > 0 AND o.lock_lease_epoch > 0 AND o.lock_lease_epoch < {le}))`
	r := strings.NewReplacer("{occ}", quote(occ), "{occ_pk}", quote(occ+"_pk"), "{jobs}", quote(prefix+"_jobs"), "{runs}", quote(prefix+"_runs"),
		"{leases}", quote(prefix+"_leases"), "{n}", nowTable, "{bin}", binary)
	q.Migrations = append(q.Migrations, r.Replace(`IF OBJECT_ID(N'{occ}', N'U') IS NULL
CREATE TABLE {occ} (
	job_id           bigint        NOT NULL,
	scheduled_for    datetime2(7)  NOT NULL,
	job_name         nvarchar(128) {bin} NOT NULL,
	attempt          int           NOT NULL DEFAULT 0,
	locked_by        nvarchar(128) {bin} NULL,
	locked_at        datetime2(7)  NULL,
	lock_epoch       bigint        NOT NULL,
	lock_lease_epoch bigint        NOT NULL DEFAULT 0,
	not_before       datetime2(7)  NULL,
	created_at       datetime2(7)  NOT NULL,
	CONSTRAINT {occ_pk} PRIMARY KEY (job_id, scheduled_for)
)`))
	q.Occurrences = sqlstore.OccurrenceQueries{
		// The spawn's transaction holds the job row (its release came
		// first), so no other spawn of the job counts meanwhile.
		Insert: r.Replace(`INSERT INTO {occ} (job_id, job_name, scheduled_for, attempt, locked_by, locked_at, lock_epoch, lock_lease_epoch, created_at)
SELECT @p1, @p2, @p3, 0, @p4, n.now, @p5, @p6, n.now FROM {n} AS n
WHERE @p7 = 0 OR (SELECT COUNT(*) FROM {occ} AS c WHERE c.job_id = @p1) < @p7`),
		Candidates: r.Replace(`SELECT TOP (@p2) o.job_id, o.job_name, o.scheduled_for, o.lock_epoch, CAST(CASE WHEN o.locked_by IS NULL THEN 0 ELSE 1 END AS bit)
FROM {occ} AS o JOIN {jobs} AS j ON j.id = o.job_id CROSS JOIN {n} AS n
WHERE ` + strings.ReplaceAll(claimable, "{le}", "@p1") + `
ORDER BY o.scheduled_for`),
		Claim: r.Replace(`UPDATE o SET locked_by = @p1, locked_at = n.now, lock_epoch = o.lock_epoch + 1, lock_lease_epoch = @p2
FROM {occ} AS o WITH (UPDLOCK, ROWLOCK) JOIN {jobs} AS j ON j.id = o.job_id CROSS JOIN {n} AS n
WHERE o.job_id = @p3 AND o.scheduled_for = @p4 AND o.lock_epoch = @p5 AND ` + strings.ReplaceAll(claimable, "{le}", "@p2")),
		Read: r.Replace(`SELECT o.attempt, o.lock_epoch, n.now FROM {occ} AS o CROSS JOIN {n} AS n WHERE o.job_id = @p1 AND o.scheduled_for = @p2`),
		Start: r.Replace(`UPDATE o SET attempt = @p1, locked_at = n.now
FROM {occ} AS o CROSS JOIN {n} AS n WHERE ` + lock("2")),
		AbandonRunning: r.Replace(`UPDATE {runs} SET outcome = N'abandoned', finished_at = SYSUTCDATETIME(),
	error = N'the executing instance stopped heartbeating its lock'
WHERE job_id = @p1 AND scheduled_for = @p2 AND outcome = N'running'`),
		Heartbeat: r.Replace(`UPDATE o SET locked_at = n.now FROM {occ} AS o CROSS JOIN {n} AS n WHERE ` + lock("1")),
		Release: r.Replace(`UPDATE o SET locked_by = NULL, locked_at = NULL, lock_lease_epoch = 0, attempt = @p1,
	not_before = ` + addMS(msParam("@p2"), "n.now") + `
FROM {occ} AS o CROSS JOIN {n} AS n WHERE ` + lock("3")),
		Delete:    r.Replace(`DELETE o FROM {occ} AS o WHERE ` + lock("1")),
		DeleteJob: r.Replace(`DELETE FROM {occ} WHERE job_id = @p1`),
		SetBreaker: r.Replace(`UPDATE j SET breaker_count = @p1, breaker_opened_at = CASE WHEN @p2 = 1 THEN n.now END,
	breaker_changed_at = CASE WHEN @p3 = 1 THEN n.now ELSE j.breaker_changed_at END
FROM {jobs} AS j CROSS JOIN {n} AS n
WHERE j.id = @p4`),
		Count: r.Replace(`SELECT COUNT(*) FROM {occ} WHERE job_id = @p1`),
	}
	return q
}
