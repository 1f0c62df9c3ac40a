package mysql

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// singletonQueries returns the singleton statements for the table prefix.
// Each write sets a column to the microsecond clock, so it changes the row
// and rows affected counts it (clientFoundRows=false).
func singletonQueries(prefix string) sqlstore.SingletonQueries {
	r := strings.NewReplacer("{t}", prefix+"_singletons", "{now}", now, "{options}", tableOptions, "{leases}", prefix+"_leases",
		"{member}", sqlstore.MemberLeasePrefix)
	cols := `state, state_saved_at, heartbeat_at, holder_id, lease_epoch, started_at, restarts, spec, spec_hash, paused,
	failures, last_error, last_error_at, node_id, node_epoch, generation, {now}`
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
	last_error_at  datetime(6),
	` + sqlstore.ColumnsDDL(placementColumns) + `
) {options}`)},
		// failures, last_error, last_error_at: why a singleton's runs end
		// (status failing); tables of earlier versions lack them.
		Columns: append([]sqlstore.Column{
			{Table: prefix + "_singletons", Name: "failures", Add: r.Replace(`ALTER TABLE {t} ADD COLUMN failures bigint NOT NULL DEFAULT 0`)},
			{Table: prefix + "_singletons", Name: "last_error", Add: r.Replace(`ALTER TABLE {t} ADD COLUMN last_error text`)},
			{Table: prefix + "_singletons", Name: "last_error_at", Add: r.Replace(`ALTER TABLE {t} ADD COLUMN last_error_at datetime(6)`)},
		}, sqlstore.AddColumns(prefix+"_singletons", r.Replace(`ALTER TABLE {t} ADD COLUMN `), placementColumns)...),
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

		// Placement by node (sqlstore/placement.go). Each argument appears
		// once, in the documented order: the holder and epoch enter through
		// a derived table p. The candidates, a derived table with LIMIT, are
		// materialized before the update (so the table may be both read and
		// updated); the update locks each row and checks it again.
		Place: r.Replace(`UPDATE {t} AS s
JOIN (SELECT CAST(? AS CHAR(128)) COLLATE utf8mb4_bin AS h, CAST(? AS SIGNED) AS e) AS p
JOIN {leases} AS m ON m.lease_name = CONCAT('{member}', p.h) AND m.holder_id = p.h AND m.lease_epoch = p.e AND m.expires_at > {now}
JOIN (
	SELECT c.name FROM {t} AS c
	WHERE c.paused = false AND c.name IN (SELECT j.n FROM JSON_TABLE(?, '$[*]' COLUMNS (n varchar(128) PATH '$')) AS j)
		AND NOT ` + live("c") + `
	ORDER BY c.name LIMIT ?
) AS x ON x.name = s.name
SET s.node_id = p.h, s.node_epoch = p.e, s.generation = GREATEST(s.generation, s.lease_epoch) + 1
WHERE NOT ` + live("s")),
		Give: r.Replace(`UPDATE {t} AS s
JOIN (SELECT CAST(? AS CHAR(128)) COLLATE utf8mb4_bin AS dst, CAST(? AS CHAR(128)) COLLATE utf8mb4_bin AS h, CAST(? AS SIGNED) AS e) AS p
JOIN {leases} AS d ON d.lease_name = CONCAT('{member}', p.dst) AND d.holder_id = p.dst AND d.expires_at > {now}
JOIN {leases} AS m ON m.lease_name = CONCAT('{member}', p.h) AND m.holder_id = p.h AND m.lease_epoch = p.e AND m.expires_at > {now}
SET s.node_id = p.dst, s.node_epoch = d.lease_epoch, s.generation = GREATEST(s.generation, s.lease_epoch) + 1
WHERE s.node_id = p.h AND s.node_epoch = p.e
	AND s.name IN (SELECT j.n FROM JSON_TABLE(?, '$[*]' COLUMNS (n varchar(128) PATH '$')) AS j)`),
		Assigned: r.Replace(`SELECT name, generation FROM {t} WHERE node_id = ? AND node_epoch = ? ORDER BY name`),
		Placement: r.Replace(`SELECT m.holder_id, m.lease_epoch,
	(SELECT count(*) FROM {t} AS s WHERE s.node_id = m.holder_id AND s.node_epoch = m.lease_epoch AND s.paused = false),
	m.expires_at, {now}
FROM {leases} AS m
WHERE m.lease_name LIKE '{member}%' AND m.lease_name = CONCAT('{member}', m.holder_id) AND m.expires_at > {now}
UNION ALL
SELECT NULL, 0, (SELECT count(*) FROM {t} AS s WHERE s.paused = false AND NOT ` + live("s") + `), NULL, {now}`),
		StartAssigned: r.Replace(`UPDATE {t} AS s SET s.restarts = IF(s.started_at IS NULL, s.restarts, s.restarts + 1),
	s.holder_id = ?, s.lease_epoch = ?, s.started_at = {now}, s.heartbeat_at = {now}
WHERE s.name = ? AND s.node_id = ? AND s.generation = ? AND ` + live("s")),
		// StartMany without RETURNING: Write (holder, holder, pairs),
		// then Read (holder, pairs) the rows it started, fenced as
		// SaveAssigned.
		StartManyWR: sqlstore.WriteRead{
			Write: r.Replace(`UPDATE {t} AS s SET s.restarts = IF(s.started_at IS NULL, s.restarts, s.restarts + 1),
	s.holder_id = ?, s.lease_epoch = s.generation, s.started_at = {now}, s.heartbeat_at = {now}
WHERE s.node_id = ? AND (s.name, s.generation) IN (SELECT j.n, j.g FROM JSON_TABLE(?, '$[*]' COLUMNS (n varchar(128) PATH '$.n', g bigint PATH '$.g')) AS j)
	AND ` + live("s")),
			Read: r.Replace(`SELECT s.name, s.state FROM {t} AS s
WHERE s.holder_id = ? AND (s.name, s.lease_epoch) IN (SELECT j.n, j.g FROM JSON_TABLE(?, '$[*]' COLUMNS (n varchar(128) PATH '$.n', g bigint PATH '$.g')) AS j)
	AND ` + assigned),
		},
		FailAssigned: r.Replace(`UPDATE {t} AS s SET s.last_error = ?, s.last_error_at = {now}, s.failures = (s.failures + 1) * ?
WHERE s.name = ? AND s.holder_id = ? AND s.lease_epoch = ? AND ` + assigned),
		SaveAssigned: r.Replace(`UPDATE {t} AS s SET s.state = ?, s.state_saved_at = {now}, s.heartbeat_at = {now}
WHERE s.name = ? AND s.holder_id = ? AND s.lease_epoch = ? AND ` + assigned),
		HeartbeatAssigned: r.Replace(`UPDATE {t} AS s SET s.heartbeat_at = {now}
WHERE s.name = ? AND s.holder_id = ? AND s.lease_epoch = ? AND ` + assigned),
	}
}

// placementColumns are the singleton's assignment (sqlstore.SingletonQueries,
// "Placement by node").
var placementColumns = [][2]string{
	{"node_id", "varchar(128)"},
	{"node_epoch", "bigint NOT NULL DEFAULT 0"},
	{"generation", "bigint NOT NULL DEFAULT 0"},
}

// live is the condition that the assignment of row s is live: its node's
// member lease is live under node_epoch.
func live(s string) string {
	return `EXISTS (SELECT 1 FROM {leases} AS l WHERE l.lease_name = CONCAT('{member}', ` + s + `.node_id) AND l.holder_id = ` + s + `.node_id
		AND l.lease_epoch = ` + s + `.node_epoch AND l.expires_at > {now})`
}

// assigned is the fence of a running singleton's writes: the row's run
// (holder_id, lease_epoch) is its assignment (node_id, generation), and
// the assignment is live.
var assigned = `s.node_id = s.holder_id AND s.generation = s.lease_epoch AND ` + live("s")
