package mysql

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// withCheckpoints adds the run checkpoint table (sqlstore.CheckpointQueries)
// to the scheduler's statements: its CREATE statement after the others.
func withCheckpoints(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	r := strings.NewReplacer("{ck}", prefix+"_run_checkpoints", "{now}", now, "{options}", tableOptions)
	q.Migrations = append(q.Migrations,
		// mediumtext: text holds only 64 KiB of bytes, exactly
		// sqlstore.MaxCheckpointBytes; no margin is worth a surprise.
		r.Replace(`CREATE TABLE IF NOT EXISTS {ck} (
	job_id        bigint      NOT NULL,
	scheduled_for datetime(6) NOT NULL,
	attempt       int         NOT NULL,
	saved_at      datetime(6) NOT NULL,
	checkpoint    mediumtext  NOT NULL,
	PRIMARY KEY (job_id, scheduled_for, attempt),
	KEY saved (saved_at)
) {options}`))
	q.Checkpoints = sqlstore.CheckpointQueries{
		Save: r.Replace(`INSERT INTO {ck} (job_id, scheduled_for, attempt, saved_at, checkpoint)
VALUES (?, ?, ?, {now}, ?) ON DUPLICATE KEY UPDATE saved_at = VALUES(saved_at), checkpoint = VALUES(checkpoint)`),
		Latest: r.Replace(`SELECT attempt, checkpoint FROM {ck}
WHERE job_id = ? AND scheduled_for = ? AND attempt < ? ORDER BY attempt DESC LIMIT 1`),
		Between: r.Replace(`SELECT scheduled_for, attempt, checkpoint FROM {ck}
WHERE job_id = ? AND scheduled_for BETWEEN ? AND ?`),
		DeleteJob: r.Replace(`DELETE FROM {ck} WHERE job_id = ?`),
		Prune:     r.Replace(`DELETE FROM {ck} WHERE saved_at < ` + plusMS(now, "-?")),
	}
	return q
}
