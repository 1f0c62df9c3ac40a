package postgres

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// withStartFenced adds StartRunsFenced: StartRuns with the lease fence of
// fenced (a CTE that checks and share-locks the lease row) joined into its
// lock of the job rows, so that no run is inserted unless the lease holds.
// The leader's claim starts the runs of one-off jobs itself; those of
// recurring jobs (a backlog of a run_all job: one claim, start and finish
// per occurrence) were started in a fenced transaction of five round trips.
func withStartFenced(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	const join = "JOIN v ON j.id = v.id\n\tWHERE"
	if !strings.HasPrefix(q.StartRuns, "WITH ") || strings.Count(q.StartRuns, join) != 1 {
		panic("postgres: cannot fence StartRuns")
	}
	f := strings.ReplaceAll(`WITH f AS (
	SELECT 1 FROM {leases} WHERE lease_name = $8 AND holder_id = $9 AND lease_epoch = $10::bigint
		AND expires_at > clock_timestamp()
	FOR SHARE
), `, "{leases}", prefix+"_leases")
	q.StartRunsFenced = f + strings.Replace(q.StartRuns[len("WITH "):], join, "JOIN v ON j.id = v.id CROSS JOIN f\n\tWHERE", 1)
	return q
}
