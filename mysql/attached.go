package mysql

import (
	"fmt"
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// attach adds to q the migration of a table of what a run leaves beside its
// row, one row per attempt (job_id, scheduled_for, attempt): a time column
// at, indexed, and a text column body. The run checkpoints and the run
// output are two such tables. It returns the statements that read a job's
// rows between two times, delete them all, and prune those older than a
// number of milliseconds; each table adds its own write.
//
// body is a mediumtext (up to 16 MiB): text holds only 64 KiB of bytes,
// exactly sqlstore.MaxCheckpointBytes, and no margin is worth a surprise;
// sqlstore.MaxOutputBytes is larger still.
func attach(q *sqlstore.JobQueries, table, at, body string) (between, deleteJob, prune string) {
	// The column names are padded so that the CREATE reads as a table.
	r := strings.NewReplacer("{t}", table, "{at}", at, "{body}", body, "{key}", strings.TrimSuffix(at, "_at"),
		"{at_col}", fmt.Sprintf("%-13s", at), "{body_col}", fmt.Sprintf("%-13s", body), "{options}", tableOptions)
	q.Migrations = append(q.Migrations, r.Replace(`CREATE TABLE IF NOT EXISTS {t} (
	job_id        bigint      NOT NULL,
	scheduled_for datetime(6) NOT NULL,
	attempt       int         NOT NULL,
	{at_col} datetime(6) NOT NULL,
	{body_col} mediumtext  NOT NULL,
	PRIMARY KEY (job_id, scheduled_for, attempt),
	KEY {key} ({at})
) {options}`))
	return r.Replace(`SELECT scheduled_for, attempt, {body} FROM {t}
WHERE job_id = ? AND scheduled_for BETWEEN ? AND ?`),
		r.Replace(`DELETE FROM {t} WHERE job_id = ?`),
		r.Replace(`DELETE FROM {t} WHERE {at} < ` + plusMS(now, "-?"))
}

// withCheckpoints adds the run checkpoint table (sqlstore.CheckpointQueries)
// to the scheduler's statements: its CREATE statement after the others.
func withCheckpoints(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	ck := sqlstore.CheckpointQueries{}
	ck.Between, ck.DeleteJob, ck.Prune = attach(&q, prefix+"_run_checkpoints", "saved_at", "checkpoint")
	r := strings.NewReplacer("{ck}", prefix+"_run_checkpoints", "{now}", now)
	ck.Save = r.Replace(`INSERT INTO {ck} (job_id, scheduled_for, attempt, saved_at, checkpoint)
VALUES (?, ?, ?, {now}, ?) ON DUPLICATE KEY UPDATE saved_at = VALUES(saved_at), checkpoint = VALUES(checkpoint)`)
	ck.Latest = r.Replace(`SELECT attempt, checkpoint FROM {ck}
WHERE job_id = ? AND scheduled_for = ? AND attempt < ? ORDER BY attempt DESC LIMIT 1`)
	q.Checkpoints = ck
	return q
}

// withOutput adds the run output table (sqlstore.OutputQueries) to the
// scheduler's statements: its CREATE statement after the others.
func withOutput(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	out := sqlstore.OutputQueries{}
	out.Between, out.DeleteJob, out.Prune = attach(&q, prefix+"_run_output", "finished_at", "output")
	r := strings.NewReplacer("{out}", prefix+"_run_output", "{now}", now)
	out.Insert = r.Replace(`INSERT INTO {out} (job_id, scheduled_for, attempt, finished_at, output)
VALUES (?, ?, ?, {now}, ?) ON DUPLICATE KEY UPDATE job_id = job_id`)
	q.Output = out
	q.FinishRunsJSON.Output = r.Replace(`INSERT INTO {out} (job_id, scheduled_for, attempt, finished_at, output)
SELECT v.id, v.sf, v.attempt, {now}, v.output FROM JSON_TABLE(?, '$[*]' COLUMNS (id bigint PATH '$.id',
	sf datetime(6) PATH '$.sf', attempt int PATH '$.attempt', output mediumtext CHARACTER SET utf8mb4 PATH '$.output')) v
ON DUPLICATE KEY UPDATE job_id = {out}.job_id`)
	return q
}
