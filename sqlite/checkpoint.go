package sqlite

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// withCheckpoints adds the run checkpoint table (sqlstore.CheckpointQueries)
// to the scheduler's statements: its CREATE statements after the others.
func withCheckpoints(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	r := strings.NewReplacer("{ck}", prefix+"_run_checkpoints", "{now}", now)
	q.Migrations = append(q.Migrations,
		r.Replace(`CREATE TABLE IF NOT EXISTS {ck} (
	job_id        INTEGER NOT NULL,
	scheduled_for TEXT    NOT NULL,
	attempt       INTEGER NOT NULL,
	saved_at      TEXT    NOT NULL,
	checkpoint    TEXT    NOT NULL,
	PRIMARY KEY (job_id, scheduled_for, attempt)
)`),
		r.Replace(`CREATE INDEX IF NOT EXISTS {ck}_saved_at ON {ck} (saved_at)`))
	q.Checkpoints = sqlstore.CheckpointQueries{
		Save: r.Replace(`INSERT INTO {ck} (job_id, scheduled_for, attempt, saved_at, checkpoint)
VALUES (?1, ?2, ?3, {now}, ?4)
ON CONFLICT (job_id, scheduled_for, attempt) DO UPDATE SET saved_at = excluded.saved_at, checkpoint = excluded.checkpoint`),
		Latest: r.Replace(`SELECT attempt, checkpoint FROM {ck}
WHERE job_id = ?1 AND scheduled_for = ?2 AND attempt < ?3 ORDER BY attempt DESC LIMIT 1`),
		Between: r.Replace(`SELECT scheduled_for, attempt, checkpoint FROM {ck}
WHERE job_id = ?1 AND scheduled_for >= ?2 AND scheduled_for <= ?3`),
		DeleteJob: r.Replace(`DELETE FROM {ck} WHERE job_id = ?1`),
		Prune:     r.Replace(`DELETE FROM {ck} WHERE saved_at < ` + nowPlus("-?1")),
	}
	return q
}
