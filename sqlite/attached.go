package sqlite

import (
	"fmt"
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// attach adds to q the migrations of a table of what a run leaves beside its
// row, one row per attempt (job_id, scheduled_for, attempt): a time column
// at, indexed as table_index, and a text column body. The run checkpoints
// and the run output are two such tables. It returns the statements that
// read a job's rows between two times, delete them all, and prune those
// older than a number of milliseconds; each table adds its own write.
func attach(q *sqlstore.JobQueries, table, at, body, index string) (between, deleteJob, prune string) {
	// The column names are padded so that the CREATE reads as a table.
	r := strings.NewReplacer("{t}", table, "{at}", at, "{body}", body, "{index}", index,
		"{at_col}", fmt.Sprintf("%-13s", at), "{body_col}", fmt.Sprintf("%-13s", body))
	q.Migrations = append(q.Migrations, r.Replace(`CREATE TABLE IF NOT EXISTS {t} (
	job_id        INTEGER NOT NULL,
	scheduled_for TEXT    NOT NULL,
	attempt       INTEGER NOT NULL,
	{at_col} TEXT    NOT NULL,
	{body_col} TEXT    NOT NULL,
	PRIMARY KEY (job_id, scheduled_for, attempt)
)`),
		r.Replace(`CREATE INDEX IF NOT EXISTS {t}_{index} ON {t} ({at})`))
	return r.Replace(`SELECT scheduled_for, attempt, {body} FROM {t}
WHERE job_id = ?1 AND scheduled_for >= ?2 AND scheduled_for <= ?3`),
		r.Replace(`DELETE FROM {t} WHERE job_id = ?1`),
		r.Replace(`DELETE FROM {t} WHERE {at} < ` + nowPlus("-?1"))
}

// withCheckpoints adds the run checkpoint table (sqlstore.CheckpointQueries)
// to the scheduler's statements: its CREATE statements after the others.
func withCheckpoints(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	ck := sqlstore.CheckpointQueries{}
	ck.Between, ck.DeleteJob, ck.Prune = attach(&q, prefix+"_run_checkpoints", "saved_at", "checkpoint", "saved_at")
	r := strings.NewReplacer("{ck}", prefix+"_run_checkpoints", "{now}", now)
	ck.Save = r.Replace(`INSERT INTO {ck} (job_id, scheduled_for, attempt, saved_at, checkpoint)
VALUES (?1, ?2, ?3, {now}, ?4)
ON CONFLICT (job_id, scheduled_for, attempt) DO UPDATE SET saved_at = excluded.saved_at, checkpoint = excluded.checkpoint`)
	ck.Latest = r.Replace(`SELECT attempt, checkpoint FROM {ck}
WHERE job_id = ?1 AND scheduled_for = ?2 AND attempt < ?3 ORDER BY attempt DESC LIMIT 1`)
	q.Checkpoints = ck
	return q
}

// withOutput adds the run output table (sqlstore.OutputQueries) to the
// scheduler's statements: its CREATE statements after the others.
func withOutput(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	out := sqlstore.OutputQueries{}
	out.Between, out.DeleteJob, out.Prune = attach(&q, prefix+"_run_output", "finished_at", "output", "finished")
	out.Insert = `INSERT INTO ` + prefix + `_run_output (job_id, scheduled_for, attempt, finished_at, output)
VALUES (?1, ?2, ?3, ` + now + `, ?4) ON CONFLICT DO NOTHING`
	q.Output = out
	return q
}
