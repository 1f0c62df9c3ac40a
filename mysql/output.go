package mysql

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// withOutput adds the run output table (sqlstore.OutputQueries) to the
// scheduler's statements: its CREATE statement after the others.
func withOutput(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	r := strings.NewReplacer("{out}", prefix+"_run_output", "{now}", now, "{options}", tableOptions)
	q.Migrations = append(q.Migrations,
		// mediumtext: up to 16 MiB, above sqlstore.MaxOutputBytes.
		r.Replace(`CREATE TABLE IF NOT EXISTS {out} (
	job_id        bigint      NOT NULL,
	scheduled_for datetime(6) NOT NULL,
	attempt       int         NOT NULL,
	finished_at   datetime(6) NOT NULL,
	output        mediumtext  NOT NULL,
	PRIMARY KEY (job_id, scheduled_for, attempt),
	KEY finished (finished_at)
) {options}`))
	q.Output = sqlstore.OutputQueries{
		Insert: r.Replace(`INSERT INTO {out} (job_id, scheduled_for, attempt, finished_at, output)
VALUES (?, ?, ?, {now}, ?) ON DUPLICATE KEY UPDATE job_id = job_id`),
		Between: r.Replace(`SELECT scheduled_for, attempt, output FROM {out}
WHERE job_id = ? AND scheduled_for BETWEEN ? AND ?`),
		DeleteJob: r.Replace(`DELETE FROM {out} WHERE job_id = ?`),
		Prune:     r.Replace(`DELETE FROM {out} WHERE finished_at < ` + plusMS(now, "-?")),
	}
	q.FinishRunsJSON.Output = r.Replace(`INSERT INTO {out} (job_id, scheduled_for, attempt, finished_at, output)
SELECT v.id, v.sf, v.attempt, {now}, v.output FROM JSON_TABLE(?, '$[*]' COLUMNS (id bigint PATH '$.id',
	sf datetime(6) PATH '$.sf', attempt int PATH '$.attempt', output mediumtext CHARACTER SET utf8mb4 PATH '$.output')) v
ON DUPLICATE KEY UPDATE job_id = {out}.job_id`)
	return q
}
