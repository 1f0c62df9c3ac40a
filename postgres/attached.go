package postgres

import (
	"fmt"
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// attach adds to q the migrations of a table of what a run leaves beside its
// row, one row per attempt (job_id, scheduled_for, attempt): a time column
// at, indexed, and a text column body. The run checkpoints and the run
// output are two such tables. It returns the statements that read a job's
// rows between two times, delete them all, and prune those older than a
// number of milliseconds; each table adds its own write.
func attach(q *sqlstore.JobQueries, table, at, body string) (between, deleteJob, prune string) {
	// The column names are padded so that the CREATE reads as a table.
	r := strings.NewReplacer("{t}", table, "{at}", at, "{body}", body,
		"{at_col}", fmt.Sprintf("%-13s", at), "{body_col}", fmt.Sprintf("%-13s", body))
	q.Migrations = append(q.Migrations, r.Replace(`CREATE TABLE IF NOT EXISTS {t} (
	job_id        bigint      NOT NULL,
	scheduled_for timestamptz NOT NULL,
	attempt       integer     NOT NULL,
	{at_col} timestamptz NOT NULL,
	{body_col} text        NOT NULL,
	PRIMARY KEY (job_id, scheduled_for, attempt)
)`),
		r.Replace(`CREATE INDEX IF NOT EXISTS {t}_{at} ON {t} ({at})`))
	return r.Replace(`SELECT scheduled_for, attempt, {body} FROM {t}
WHERE job_id = $1 AND scheduled_for BETWEEN $2 AND $3`),
		r.Replace(`DELETE FROM {t} WHERE job_id = $1`),
		r.Replace(`DELETE FROM {t} WHERE {at} < clock_timestamp() - $1::bigint * interval '1 millisecond'`)
}

// withCheckpoints adds the run checkpoint table (sqlstore.CheckpointQueries)
// to the scheduler's statements: its CREATE statements after the others.
func withCheckpoints(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	ck := sqlstore.CheckpointQueries{}
	ck.Between, ck.DeleteJob, ck.Prune = attach(&q, prefix+"_run_checkpoints", "saved_at", "checkpoint")
	r := strings.NewReplacer("{ck}", prefix+"_run_checkpoints")
	ck.Save = r.Replace(`INSERT INTO {ck} (job_id, scheduled_for, attempt, saved_at, checkpoint)
VALUES ($1, $2, $3, clock_timestamp(), $4)
ON CONFLICT (job_id, scheduled_for, attempt) DO UPDATE SET saved_at = EXCLUDED.saved_at, checkpoint = EXCLUDED.checkpoint`)
	ck.Latest = r.Replace(`SELECT attempt, checkpoint FROM {ck}
WHERE job_id = $1 AND scheduled_for = $2 AND attempt < $3 ORDER BY attempt DESC LIMIT 1`)
	q.Checkpoints = ck
	return q
}

// withOutput adds the run output table (sqlstore.OutputQueries) to the
// scheduler's statements: its CREATE statements after the others.
func withOutput(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	out := sqlstore.OutputQueries{}
	out.Between, out.DeleteJob, out.Prune = attach(&q, prefix+"_run_output", "finished_at", "output")
	out.Insert = `INSERT INTO ` + prefix + `_run_output (job_id, scheduled_for, attempt, finished_at, output)
VALUES ($1, $2, $3, clock_timestamp(), $4) ON CONFLICT DO NOTHING`
	q.Output = out
	return q
}
