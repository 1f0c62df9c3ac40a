package sqlserver

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// withCheckpoints adds the run checkpoint table (sqlstore.CheckpointQueries)
// to the scheduler's statements: its CREATE statements after the others.
func withCheckpoints(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	ck := prefix + "_run_checkpoints"
	r := strings.NewReplacer("{ck}", quote(ck), "{ck_pk}", quote(ck+"_pk"), "{ck_saved}", quote(ck+"_saved"))
	q.Migrations = append(q.Migrations,
		r.Replace(`IF OBJECT_ID(N'{ck}', N'U') IS NULL
CREATE TABLE {ck} (
	job_id        bigint        NOT NULL,
	scheduled_for datetime2(7)  NOT NULL,
	attempt       int           NOT NULL,
	saved_at      datetime2(7)  NOT NULL,
	checkpoint    nvarchar(max) NOT NULL,
	CONSTRAINT {ck_pk} PRIMARY KEY (job_id, scheduled_for, attempt)
)`),
		r.Replace(`IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'{ck}', N'U') AND name = N'`+ck+`_saved')
CREATE INDEX {ck_saved} ON {ck} (saved_at)`))
	q.Checkpoints = sqlstore.CheckpointQueries{
		// One MERGE under WITH (UPDLOCK, HOLDLOCK), as Acquire: the
		// key-range lock makes an insert and an update of the same key
		// exclusive (only the job lock's holder saves anyway, and
		// SaveCheckpoint's transaction holds the job row until it
		// commits); one clock reading for either branch.
		Save: r.Replace(`MERGE INTO {ck} WITH (UPDLOCK, HOLDLOCK) AS c
USING (SELECT @p1 AS job_id, @p2 AS scheduled_for, @p3 AS attempt, @p4 AS checkpoint, SYSUTCDATETIME() AS now) AS v
ON c.job_id = v.job_id AND c.scheduled_for = v.scheduled_for AND c.attempt = v.attempt
WHEN MATCHED THEN UPDATE SET saved_at = v.now, checkpoint = v.checkpoint
WHEN NOT MATCHED THEN INSERT (job_id, scheduled_for, attempt, saved_at, checkpoint)
	VALUES (v.job_id, v.scheduled_for, v.attempt, v.now, v.checkpoint);`),
		Latest: r.Replace(`SELECT TOP (1) attempt, checkpoint FROM {ck}
WHERE job_id = @p1 AND scheduled_for = @p2 AND attempt < @p3 ORDER BY attempt DESC`),
		Between: r.Replace(`SELECT scheduled_for, attempt, checkpoint FROM {ck}
WHERE job_id = @p1 AND scheduled_for BETWEEN @p2 AND @p3`),
		DeleteJob: r.Replace(`DELETE FROM {ck} WHERE job_id = @p1`),
		Prune:     r.Replace(`DELETE FROM {ck} WHERE saved_at < ` + addMS("-"+msParam("@p1"), "SYSUTCDATETIME()")),
	}
	return q
}
