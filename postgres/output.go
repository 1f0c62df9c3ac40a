package postgres

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// withOutput adds the run output table (sqlstore.OutputQueries) to the
// scheduler's statements: its CREATE statements after the others.
func withOutput(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	r := strings.NewReplacer("{out}", prefix+"_run_output")
	q.Migrations = append(q.Migrations,
		r.Replace(`CREATE TABLE IF NOT EXISTS {out} (
	job_id        bigint      NOT NULL,
	scheduled_for timestamptz NOT NULL,
	attempt       integer     NOT NULL,
	finished_at   timestamptz NOT NULL,
	output        text        NOT NULL,
	PRIMARY KEY (job_id, scheduled_for, attempt)
)`),
		r.Replace(`CREATE INDEX IF NOT EXISTS {out}_finished_at ON {out} (finished_at)`))
	q.Output = sqlstore.OutputQueries{
		Insert: r.Replace(`INSERT INTO {out} (job_id, scheduled_for, attempt, finished_at, output)
VALUES ($1, $2, $3, clock_timestamp(), $4) ON CONFLICT DO NOTHING`),
		Between: r.Replace(`SELECT scheduled_for, attempt, output FROM {out}
WHERE job_id = $1 AND scheduled_for BETWEEN $2 AND $3`),
		DeleteJob: r.Replace(`DELETE FROM {out} WHERE job_id = $1`),
		Prune:     r.Replace(`DELETE FROM {out} WHERE finished_at < clock_timestamp() - $1::bigint * interval '1 millisecond'`),
	}
	return q
}
