package sqlserver

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
// number of milliseconds; each table adds its own write. The primary key is
// named table_pk, the index table_ and at without its _at.
func attach(q *sqlstore.JobQueries, table, at, body string) (between, deleteJob, prune string) {
	index := table + "_" + strings.TrimSuffix(at, "_at")
	// The column names are padded so that the CREATE reads as a table.
	r := strings.NewReplacer("{t}", quote(table), "{pk}", quote(table+"_pk"), "{index}", quote(index), "{at}", at, "{body}", body,
		"{at_col}", fmt.Sprintf("%-13s", at), "{body_col}", fmt.Sprintf("%-13s", body))
	q.Migrations = append(q.Migrations, r.Replace(`IF OBJECT_ID(N'{t}', N'U') IS NULL
CREATE TABLE {t} (
	job_id        bigint        NOT NULL,
	scheduled_for datetime2(7)  NOT NULL,
	attempt       int           NOT NULL,
	{at_col} datetime2(7)  NOT NULL,
	{body_col} nvarchar(max) NOT NULL,
	CONSTRAINT {pk} PRIMARY KEY (job_id, scheduled_for, attempt)
)`),
		r.Replace(`IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'{t}', N'U') AND name = N'`+index+`')
CREATE INDEX {index} ON {t} ({at})`))
	return r.Replace(`SELECT scheduled_for, attempt, {body} FROM {t}
WHERE job_id = @p1 AND scheduled_for BETWEEN @p2 AND @p3`),
		r.Replace(`DELETE FROM {t} WHERE job_id = @p1`),
		r.Replace(`DELETE FROM {t} WHERE {at} < ` + addMS("-"+msParam("@p1"), "SYSUTCDATETIME()"))
}

// withCheckpoints adds the run checkpoint table (sqlstore.CheckpointQueries)
// to the scheduler's statements: its CREATE statements after the others.
func withCheckpoints(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	ck := sqlstore.CheckpointQueries{}
	ck.Between, ck.DeleteJob, ck.Prune = attach(&q, prefix+"_run_checkpoints", "saved_at", "checkpoint")
	r := strings.NewReplacer("{ck}", quote(prefix+"_run_checkpoints"))
	// One MERGE under WITH (UPDLOCK, HOLDLOCK), as Acquire: the key-range
	// lock makes an insert and an update of the same key exclusive (only
	// the job lock's holder saves anyway, and SaveCheckpoint's transaction
	// holds the job row until it commits); one clock reading for either
	// branch.
	ck.Save = r.Replace(`MERGE INTO {ck} WITH (UPDLOCK, HOLDLOCK) AS c
USING (SELECT @p1 AS job_id, @p2 AS scheduled_for, @p3 AS attempt, @p4 AS checkpoint, SYSUTCDATETIME() AS now) AS v
ON c.job_id = v.job_id AND c.scheduled_for = v.scheduled_for AND c.attempt = v.attempt
WHEN MATCHED THEN UPDATE SET saved_at = v.now, checkpoint = v.checkpoint
WHEN NOT MATCHED THEN INSERT (job_id, scheduled_for, attempt, saved_at, checkpoint)
	VALUES (v.job_id, v.scheduled_for, v.attempt, v.now, v.checkpoint);`)
	ck.Latest = r.Replace(`SELECT TOP (1) attempt, checkpoint FROM {ck}
WHERE job_id = @p1 AND scheduled_for = @p2 AND attempt < @p3 ORDER BY attempt DESC`)
	q.Checkpoints = ck
	return q
}

// withOutput adds the run output table (sqlstore.OutputQueries) to the
// scheduler's statements: its CREATE statements after the others.
func withOutput(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	out := sqlstore.OutputQueries{}
	out.Between, out.DeleteJob, out.Prune = attach(&q, prefix+"_run_output", "finished_at", "output")
	// The key-range lock makes a concurrent insert of the same run wait and
	// then find it, as ON CONFLICT DO NOTHING does.
	out.Insert = strings.ReplaceAll(`INSERT INTO {out} (job_id, scheduled_for, attempt, finished_at, output)
SELECT @p1, @p2, @p3, SYSUTCDATETIME(), @p4
WHERE NOT EXISTS (SELECT 1 FROM {out} WITH (UPDLOCK, HOLDLOCK) WHERE job_id = @p1 AND scheduled_for = @p2 AND attempt = @p3)`, "{out}", quote(prefix+"_run_output"))
	q.Output = out
	return q
}
