package mysql

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// singletonQueries returns the singleton statements for the table prefix.
// Each write sets a column to the microsecond clock, so it changes the row
// and rows affected counts it (clientFoundRows=false).
func singletonQueries(prefix string) sqlstore.SingletonQueries {
	r := strings.NewReplacer("{t}", prefix+"_singletons", "{now}", now, "{options}", tableOptions)
	cols := `state, state_saved_at, heartbeat_at, holder_id, lease_epoch, started_at, restarts, spec, spec_hash, paused,
	failures, last_error, last_error_at, {now}`
	return sqlstore.SingletonQueries{
		Migrations: []string{r.Replace(`CREATE TABLE IF NOT EXISTS {t} (
	name           varchar(128) NOT NULL PRIMARY KEY,
	state          mediumtext,
	state_saved_at datetime(6),
	heartbeat_at   datetime(6),
	holder_id      varchar(128),
	lease_epoch    bigint       NOT NULL DEFAULT 0,
	started_at     datetime(6),
	restarts       bigint       NOT NULL DEFAULT 0,
	spec           mediumtext,
	spec_hash      varchar(64),
	paused         boolean NOT NULL DEFAULT false,
	created_at     datetime(6)  NOT NULL,
	failures       bigint       NOT NULL DEFAULT 0,
	last_error     text,
	last_error_at  datetime(6)
) {options}`)},
		// failures, last_error, last_error_at: why a singleton's runs end
		// (status failing); tables of earlier versions lack them.
		Columns: []sqlstore.Column{
			{Table: prefix + "_singletons", Name: "failures", Add: r.Replace(`ALTER TABLE {t} ADD COLUMN failures bigint NOT NULL DEFAULT 0`)},
			{Table: prefix + "_singletons", Name: "last_error", Add: r.Replace(`ALTER TABLE {t} ADD COLUMN last_error text`)},
			{Table: prefix + "_singletons", Name: "last_error_at", Add: r.Replace(`ALTER TABLE {t} ADD COLUMN last_error_at datetime(6)`)},
		},
		Ensure: r.Replace(`INSERT IGNORE INTO {t} (name, created_at) VALUES (?, {now})`),
		Get:    r.Replace(`SELECT ` + cols + ` FROM {t} WHERE name = ?`),
		List:   r.Replace(`SELECT name, ` + cols + ` FROM {t} ORDER BY name`),
		Page:   r.Replace(`SELECT name, ` + cols + ` FROM {t} WHERE spec IS NOT NULL AND name > ? ORDER BY name LIMIT ?`),
		// Assignments see the ones before them: restarts reads
		// started_at before it is set.
		Start: r.Replace(`UPDATE {t} SET restarts = IF(started_at IS NULL, restarts, restarts + 1),
	holder_id = ?, lease_epoch = ?, started_at = {now}, heartbeat_at = {now} WHERE name = ?`),
		// last_error_at takes the microsecond clock: the row changes.
		Fail: r.Replace(`UPDATE {t} SET last_error = ?, last_error_at = {now}, failures = (failures + 1) * ?
WHERE name = ? AND holder_id = ? AND lease_epoch = ?`),
		Save:      r.Replace(`UPDATE {t} SET state = ?, state_saved_at = {now}, heartbeat_at = {now} WHERE name = ? AND holder_id = ? AND lease_epoch = ?`),
		Create:    r.Replace(`INSERT INTO {t} (name, spec, spec_hash, created_at) VALUES (?, ?, ?, {now})`),
		SetPaused: r.Replace(`UPDATE {t} SET paused = ? WHERE name = ? AND spec IS NOT NULL`),
		Delete:    r.Replace(`DELETE FROM {t} WHERE name = ? AND spec IS NOT NULL`),
		Heartbeat: r.Replace(`UPDATE {t} SET heartbeat_at = {now} WHERE name = ? AND holder_id = ? AND lease_epoch = ?`),
	}
}
