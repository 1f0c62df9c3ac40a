package postgres

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// withClaimAhead adds ClaimStartJobsAheadFenced: ClaimStartJobsFenced whose
// due condition reaches ahead_ms ($5) past now, for next_run_at only (a
// retry's not_before must be over now), and whose runs start at the later
// of now and their occurrence: the leader starts a run claimed ahead at its
// due time, so started_at = now would say it began before it did. At 1,000
// jobs/s falling due 1 ms apart, the leader made one such claim per job,
// about half of its client CPU (profile of -bench trickle).
func withClaimAhead(q sqlstore.JobQueries) sqlstore.JobQueries {
	const due = "j.next_run_at <= n.now AND (j.not_before IS NULL"
	const start = "u.claim_now, 'running' FROM u WHERE u.one_off_due"
	c := q.ClaimStartJobsFenced
	if strings.Count(c, due) != 1 || strings.Count(c, start) != 1 {
		panic("postgres: cannot derive ClaimStartJobsAheadFenced")
	}
	c = strings.Replace(c, due, "j.next_run_at <= n.now + $5::bigint * interval '1 millisecond' AND (j.not_before IS NULL", 1)
	q.ClaimStartJobsAheadFenced = strings.Replace(c, start, "GREATEST(u.claim_now, u.next_run_at), 'running' FROM u WHERE u.one_off_due", 1)
	return q
}
