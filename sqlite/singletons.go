package sqlite

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// singletonQueries returns the singleton statements for the table prefix.
func singletonQueries(prefix string) sqlstore.SingletonQueries {
	r := strings.NewReplacer("{t}", prefix+"_singletons", "{now}", now, "{leases}", prefix+"_leases", "{member}", sqlstore.MemberLeasePrefix)
	cols := `state, state_saved_at, heartbeat_at, holder_id, lease_epoch, started_at, restarts, spec, spec_hash, paused,
	failures, last_error, last_error_at, node_id, node_epoch, generation, {now}`
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
	last_error_at  TEXT,
	` + sqlstore.ColumnsDDL(placementColumns) + `
)`)},
		// failures, last_error, last_error_at: why a singleton's runs end
		// (status failing); tables of earlier versions lack them.
		Columns: append([]sqlstore.Column{
			{Table: prefix + "_singletons", Name: "failures", Add: r.Replace(`ALTER TABLE {t} ADD COLUMN failures INTEGER NOT NULL DEFAULT 0`)},
			{Table: prefix + "_singletons", Name: "last_error", Add: r.Replace(`ALTER TABLE {t} ADD COLUMN last_error TEXT`)},
			{Table: prefix + "_singletons", Name: "last_error_at", Add: r.Replace(`ALTER TABLE {t} ADD COLUMN last_error_at TEXT`)},
		}, sqlstore.AddColumns(prefix+"_singletons", r.Replace(`ALTER TABLE {t} ADD COLUMN `), placementColumns)...),
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

		// Placement by node (sqlstore/placement.go). One writer at a time:
		// each statement sees the assignments as the one before left them.
		Place: r.Replace(`UPDATE {t} SET node_id = ?1, node_epoch = ?2, generation = max(generation, lease_epoch) + 1
WHERE name IN (
	SELECT s.name FROM {t} AS s
	WHERE s.paused = 0 AND s.name IN (SELECT value FROM json_each(?3)) AND NOT ` + live("s") + `
	ORDER BY s.name LIMIT ?4)
AND EXISTS (SELECT 1 FROM {leases} AS m WHERE m.lease_name = '{member}' || ?1 AND m.holder_id = ?1 AND m.lease_epoch = ?2
	AND m.expires_at > {now})`),
		Give: r.Replace(`UPDATE {t} SET node_id = ?1,
	node_epoch = (SELECT d.lease_epoch FROM {leases} AS d WHERE d.lease_name = '{member}' || ?1 AND d.holder_id = ?1 AND d.expires_at > {now}),
	generation = max(generation, lease_epoch) + 1
WHERE name IN (SELECT value FROM json_each(?4)) AND node_id = ?2 AND node_epoch = ?3
AND EXISTS (SELECT 1 FROM {leases} AS d WHERE d.lease_name = '{member}' || ?1 AND d.holder_id = ?1 AND d.expires_at > {now})
AND EXISTS (SELECT 1 FROM {leases} AS m WHERE m.lease_name = '{member}' || ?2 AND m.holder_id = ?2 AND m.lease_epoch = ?3
	AND m.expires_at > {now})`),
		Assigned: r.Replace(`SELECT name, generation FROM {t} WHERE node_id = ?1 AND node_epoch = ?2 ORDER BY name`),
		Placement: r.Replace(`SELECT m.holder_id, m.lease_epoch,
	(SELECT count(*) FROM {t} AS s WHERE s.node_id = m.holder_id AND s.node_epoch = m.lease_epoch AND s.paused = 0),
	m.expires_at, {now}
FROM {leases} AS m
WHERE m.lease_name LIKE '{member}%' AND m.lease_name = '{member}' || m.holder_id AND m.expires_at > {now}
UNION ALL
SELECT NULL, 0, (SELECT count(*) FROM {t} AS s WHERE s.paused = 0 AND NOT ` + live("s") + `), NULL, {now}`),
		StartAssigned: r.Replace(`UPDATE {t} AS s SET holder_id = ?1, lease_epoch = ?2, started_at = {now}, heartbeat_at = {now},
	restarts = CASE WHEN started_at IS NULL THEN restarts ELSE restarts + 1 END
WHERE s.name = ?3 AND s.node_id = ?4 AND s.generation = ?5 AND ` + live("s")),
		StartMany: r.Replace(`UPDATE {t} AS s SET holder_id = ?1, lease_epoch = generation, started_at = {now}, heartbeat_at = {now},
	restarts = CASE WHEN started_at IS NULL THEN restarts ELSE restarts + 1 END
WHERE s.node_id = ?1 AND (s.name, s.generation) IN (SELECT json_extract(value, '$.n'), json_extract(value, '$.g') FROM json_each(?2))
	AND ` + live("s") + `
RETURNING name, state`),
		FailAssigned: r.Replace(`UPDATE {t} AS s SET last_error = ?1, last_error_at = {now}, failures = (failures + 1) * ?2
WHERE s.name = ?3 AND s.holder_id = ?4 AND s.lease_epoch = ?5 AND ` + assigned),
		SaveAssigned: r.Replace(`UPDATE {t} AS s SET state = ?1, state_saved_at = {now}, heartbeat_at = {now}
WHERE s.name = ?2 AND s.holder_id = ?3 AND s.lease_epoch = ?4 AND ` + assigned),
		HeartbeatAssigned: r.Replace(`UPDATE {t} AS s SET heartbeat_at = {now}
WHERE s.name = ?1 AND s.holder_id = ?2 AND s.lease_epoch = ?3 AND ` + assigned),
	}
}

// placementColumns are the singleton's assignment (sqlstore.SingletonQueries,
// "Placement by node").
var placementColumns = [][2]string{
	{"node_id", "TEXT"},
	{"node_epoch", "INTEGER NOT NULL DEFAULT 0"},
	{"generation", "INTEGER NOT NULL DEFAULT 0"},
}

// live is the condition that the assignment of row s is live: its node's
// member lease is live under node_epoch.
func live(s string) string {
	return `EXISTS (SELECT 1 FROM {leases} AS l WHERE l.lease_name = '{member}' || ` + s + `.node_id AND l.holder_id = ` + s + `.node_id
		AND l.lease_epoch = ` + s + `.node_epoch AND l.expires_at > {now})`
}

// assigned is the fence of a running singleton's writes: the row's run
// (holder_id, lease_epoch) is its assignment (node_id, generation), and
// the assignment is live.
var assigned = `s.node_id = s.holder_id AND s.generation = s.lease_epoch AND ` + live("s")
