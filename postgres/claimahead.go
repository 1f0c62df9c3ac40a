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

// withClaimStartAhead adds ClaimStartAhead: claim mode's ClaimStart whose
// scan of the due index reaches ahead_ms ($4) past now (a bound of the
// scan, as {duescan}'s: a filter would read every job due later), for
// next_run_at only (a retry's not_before must be over now), whose runs
// start at the later of now and their occurrence (the worker starts a run
// claimed ahead at its due time), and whose every row also says the first
// next_run_at past the window (NULL: none): the next claim's instant,
// which the worker otherwise asked for with NextDue after each claim. At
// 1,000 jobs/s falling due 1 ms apart, a worker made a claim and a NextDue
// per 2.1 jobs, most of its ~300 µs of client CPU per job (-bench trickle).
func withClaimStartAhead(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	const bound = "j.next_run_at <= (SELECT now FROM n) AND"
	const start = "u.claim_now, 'running' FROM u WHERE u.one_off_due"
	const tail = "SELECT u.*, u.id IN (SELECT i.job_id FROM i) FROM u"
	c := q.ClaimStart
	if strings.Count(c, bound) != 1 || strings.Count(c, start) != 1 || strings.Count(c, tail) != 1 || !strings.HasSuffix(c, tail) {
		panic("postgres: cannot derive ClaimStartAhead")
	}
	const window = "(SELECT now FROM n) + $4::bigint * interval '1 millisecond'"
	c = strings.Replace(c, bound, "j.next_run_at <= "+window+" AND", 1)
	c = strings.Replace(c, start, "GREATEST(u.claim_now, u.next_run_at), 'running' FROM u WHERE u.one_off_due", 1)
	// The next entry of the due index past the window (next_run_at > …
	// implies the index's predicate); NextDue's statement, at the claim's
	// own now, so that no job falls due between the two unseen.
	q.ClaimStartAhead = strings.Replace(c, tail, tail[:len(tail)-len(" FROM u")]+`,
	(SELECT min(x.next_run_at) FROM `+prefix+`_jobs x WHERE NOT x.paused AND x.next_run_at > `+window+`) FROM u`, 1)
	return q
}
