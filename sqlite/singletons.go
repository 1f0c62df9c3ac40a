package sqlite

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// singletonQueries returns the singleton statements for the table prefix.
func singletonQueries(prefix string) sqlstore.SingletonQueries {
	r := strings.NewReplacer("{t}", prefix+"_singletons", "{now}", now)
	cols := `state, state_saved_at, heartbeat_at, holder_id, lease_epoch, started_at, restarts, spec, spec_hash, paused,
	failures, last_error, last_error_at, {now}`
	return sqlstore.SingletonQueries{
		Migrations: []string{r.Replace(`CREATE TABLE IF NOT EXISTS {t} (
	name           TEXT    NOT NULL PRIMARY KEY,
	state          TEXT,
	state_saved_at TEXT,
	heartbeat_at   TEXT,
	holder_id      TEXT,
	lease_epoch    INTEGER NOT NULL DEFAULT 0,
	started_at     TEXT,
	restarts       INTEGER NOT NULL DEFAULT 0,
	spec           TEXT,
	spec_hash      TEXT,
	paused         INTEGER NOT NULL DEFAULT 0,
	created_at     TEXT    NOT NULL,
	failures       INTEGER NOT NULL DEFAULT 0,
	last_error     TEXT,
	last_error_at  TEXT
)`)},
		// failures, last_error, last_error_at: why a singleton's runs end
		// (status failing); tables of earlier versions lack them.
		Columns: []sqlstore.Column{
			{Table: prefix + "_singletons", Name: "failures", Add: r.Replace(`ALTER TABLE {t} ADD COLUMN failures INTEGER NOT NULL DEFAULT 0`)},
			{Table: prefix + "_singletons", Name: "last_error", Add: r.Replace(`ALTER TABLE {t} ADD COLUMN last_error TEXT`)},
			{Table: prefix + "_singletons", Name: "last_error_at", Add: r.Replace(`ALTER TABLE {t} ADD COLUMN last_error_at TEXT`)},
		},
		Ensure: r.Replace(`INSERT INTO {t} (name, created_at) VALUES (?1, {now}) ON CONFLICT (name) DO NOTHING`),
		Get:    r.Replace(`SELECT ` + cols + ` FROM {t} WHERE name = ?1`),
		List:   r.Replace(`SELECT name, ` + cols + ` FROM {t} ORDER BY name`),
		Page:   r.Replace(`SELECT name, ` + cols + ` FROM {t} WHERE spec IS NOT NULL AND name > ?1 ORDER BY name LIMIT ?2`),
		Start: r.Replace(`UPDATE {t} SET holder_id = ?1, lease_epoch = ?2, started_at = {now}, heartbeat_at = {now},
	restarts = CASE WHEN started_at IS NULL THEN restarts ELSE restarts + 1 END WHERE name = ?3`),
		Fail: r.Replace(`UPDATE {t} SET last_error = ?1, last_error_at = {now}, failures = (failures + 1) * ?2
WHERE name = ?3 AND holder_id = ?4 AND lease_epoch = ?5`),
		Save:      r.Replace(`UPDATE {t} SET state = ?1, state_saved_at = {now}, heartbeat_at = {now} WHERE name = ?2 AND holder_id = ?3 AND lease_epoch = ?4`),
		Create:    r.Replace(`INSERT INTO {t} (name, spec, spec_hash, created_at) VALUES (?1, ?2, ?3, {now})`),
		SetPaused: r.Replace(`UPDATE {t} SET paused = ?1 WHERE name = ?2 AND spec IS NOT NULL`),
		Delete:    r.Replace(`DELETE FROM {t} WHERE name = ?1 AND spec IS NOT NULL`),
		Heartbeat: r.Replace(`UPDATE {t} SET heartbeat_at = {now} WHERE name = ?1 AND holder_id = ?2 AND lease_epoch = ?3`),
	}
}
