package postgres

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// singletonQueries returns the singleton statements for the table prefix.
func singletonQueries(prefix string) sqlstore.SingletonQueries {
	r := strings.NewReplacer("{t}", prefix+"_singletons", "{now}", "clock_timestamp()")
	cols := `state, state_saved_at, heartbeat_at, holder_id, lease_epoch, started_at, restarts, spec, spec_hash, paused,
	failures, last_error, last_error_at, {now}`
	return sqlstore.SingletonQueries{
		Migrations: []string{r.Replace(`CREATE TABLE IF NOT EXISTS {t} (
	name           text        NOT NULL PRIMARY KEY,
	state          text,
	state_saved_at timestamptz,
	heartbeat_at   timestamptz,
	holder_id      text,
	lease_epoch    bigint      NOT NULL DEFAULT 0,
	started_at     timestamptz,
	restarts       bigint      NOT NULL DEFAULT 0,
	spec           text,
	spec_hash      text,
	paused         boolean NOT NULL DEFAULT false,
	created_at     timestamptz NOT NULL,
	failures       bigint      NOT NULL DEFAULT 0,
	last_error     text,
	last_error_at  timestamptz
)`),
			// A notification when a daemon singleton is created, changed,
			// paused, resumed or deleted — not on saves or heartbeats — so
			// that nodes re-read the definitions at once (ListenSingletons).
			r.Replace(`CREATE OR REPLACE FUNCTION {t}_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('{t}', '');
	RETURN NULL;
END $$`),
			r.Replace(`CREATE OR REPLACE TRIGGER {t}_notify AFTER INSERT OR DELETE OR UPDATE OF spec, spec_hash, paused ON {t}
FOR EACH STATEMENT EXECUTE FUNCTION {t}_notify()`),
		},
		// failures, last_error, last_error_at: why a singleton's runs end
		// (status failing); tables of earlier versions lack them.
		Columns: []sqlstore.Column{
			{Table: prefix + "_singletons", Name: "failures", Add: r.Replace(`ALTER TABLE {t} ADD COLUMN IF NOT EXISTS failures bigint NOT NULL DEFAULT 0`)},
			{Table: prefix + "_singletons", Name: "last_error", Add: r.Replace(`ALTER TABLE {t} ADD COLUMN IF NOT EXISTS last_error text`)},
			{Table: prefix + "_singletons", Name: "last_error_at", Add: r.Replace(`ALTER TABLE {t} ADD COLUMN IF NOT EXISTS last_error_at timestamptz`)},
		},
		Ensure: r.Replace(`INSERT INTO {t} (name, created_at) VALUES ($1, {now}) ON CONFLICT (name) DO NOTHING`),
		Get:    r.Replace(`SELECT ` + cols + ` FROM {t} WHERE name = $1`),
		List:   r.Replace(`SELECT name, ` + cols + ` FROM {t} ORDER BY name`),
		Page:   r.Replace(`SELECT name, ` + cols + ` FROM {t} WHERE spec IS NOT NULL AND name > $1 ORDER BY name LIMIT $2`),
		// One clock reading per statement: clock_timestamp() changes
		// within one.
		Start: r.Replace(`UPDATE {t} SET holder_id = $1, lease_epoch = $2, started_at = n.now, heartbeat_at = n.now,
	restarts = CASE WHEN started_at IS NULL THEN restarts ELSE restarts + 1 END
FROM (SELECT {now} AS now) AS n WHERE name = $3`),
		Fail: r.Replace(`UPDATE {t} SET last_error = $1, last_error_at = {now}, failures = (failures + 1) * $2::bigint
WHERE name = $3 AND holder_id = $4 AND lease_epoch = $5`),
		Save: r.Replace(`UPDATE {t} SET state = $1, state_saved_at = n.now, heartbeat_at = n.now
FROM (SELECT {now} AS now) AS n WHERE name = $2 AND holder_id = $3 AND lease_epoch = $4`),
		Create:    r.Replace(`INSERT INTO {t} (name, spec, spec_hash, created_at) VALUES ($1, $2, $3, {now})`),
		SetPaused: r.Replace(`UPDATE {t} SET paused = $1 WHERE name = $2 AND spec IS NOT NULL`),
		Delete:    r.Replace(`DELETE FROM {t} WHERE name = $1 AND spec IS NOT NULL`),
		Heartbeat: r.Replace(`UPDATE {t} SET heartbeat_at = {now} WHERE name = $1 AND holder_id = $2 AND lease_epoch = $3`),
	}
}
