package sqlserver

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// withOutput adds the run output table (sqlstore.OutputQueries) to the
// scheduler's statements: its CREATE statements after the others.
func withOutput(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	out := prefix + "_run_output"
	r := strings.NewReplacer("{out}", quote(out), "{out_pk}", quote(out+"_pk"), "{out_finished}", quote(out+"_finished"))
	q.Migrations = append(q.Migrations,
		r.Replace(`IF OBJECT_ID(N'{out}', N'U') IS NULL
CREATE TABLE {out} (
	job_id        bigint        NOT NULL,
	scheduled_for datetime2(7)  NOT NULL,
	attempt       int           NOT NULL,
	finished_at   datetime2(7)  NOT NULL,
	output        nvarchar(max) NOT NULL,
	CONSTRAINT {out_pk} PRIMARY KEY (job_id, scheduled_for, attempt)
)`),
		r.Replace(`IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'{out}', N'U') AND name = N'`+out+`_finished')
CREATE INDEX {out_finished} ON {out} (finished_at)`))
	q.Output = sqlstore.OutputQueries{
		// The key-range lock makes a concurrent insert of the same run
		// wait and then find it, as ON CONFLICT DO NOTHING does.
		Insert: r.Replace(`INSERT INTO {out} (job_id, scheduled_for, attempt, finished_at, output)
SELECT @p1, @p2, @p3, SYSUTCDATETIME(), @p4
WHERE NOT EXISTS (SELECT 1 FROM {out} WITH (UPDLOCK, HOLDLOCK) WHERE job_id = @p1 AND scheduled_for = @p2 AND attempt = @p3)`),
		Between: r.Replace(`SELECT scheduled_for, attempt, output FROM {out}
WHERE job_id = @p1 AND scheduled_for BETWEEN @p2 AND @p3`),
		DeleteJob: r.Replace(`DELETE FROM {out} WHERE job_id = @p1`),
		Prune:     r.Replace(`DELETE FROM {out} WHERE finished_at < ` + addMS("-"+msParam("@p1"), "SYSUTCDATETIME()")),
	}
	return q
}
