package postgres

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// withCheckpoints adds the run checkpoint table (sqlstore.CheckpointQueries)
// to the scheduler's statements: its CREATE statements after the others.
func withCheckpoints(prefix string, q sqlstore.JobQueries) sqlstore.JobQueries {
	r := strings.NewReplacer("{ck}", prefix+"_run_checkpoints")
	q.Migrations = append(q.Migrations,
		r.Replace(`CREATE TABLE IF NOT EXISTS {ck} (
	job_id        bigint      NOT NULL,
	scheduled_for timestamptz NOT NULL,
	attempt       integer     NOT NULL,
	saved_at      timestamptz NOT NULL,
	checkpoint    text        NOT NULL,
	PRIMARY KEY (job_id, scheduled_for, attempt)
)`),
		r.Replace(`CREATE INDEX IF NOT EXISTS {ck}_saved_at ON {ck} (saved_at)`))
	q.Checkpoints = sqlstore.CheckpointQueries{
		Save: r.Replace(`INSERT INTO {ck} (job_id, scheduled_for, attempt, saved_at, checkpoint)
VALUES ($1, $2, $3, clock_timestamp(), $4)
ON CONFLICT (job_id, scheduled_for, attempt) DO UPDATE SET saved_at = EXCLUDED.saved_at, checkpoint = EXCLUDED.checkpoint`),
		Latest: r.Replace(`SELECT attempt, checkpoint FROM {ck}
WHERE job_id = $1 AND scheduled_for = $2 AND attempt < $3 ORDER BY attempt DESC LIMIT 1`),
		Between: r.Replace(`SELECT scheduled_for, attempt, checkpoint FROM {ck}
WHERE job_id = $1 AND scheduled_for BETWEEN $2 AND $3`),
		DeleteJob: r.Replace(`DELETE FROM {ck} WHERE job_id = $1`),
		Prune:     r.Replace(`DELETE FROM {ck} WHERE saved_at < clock_timestamp() - $1::bigint * interval '1 millisecond'`),
	}
	return q
}
