package postgres

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// singletonQueries returns the singleton statements for the table prefix.
func singletonQueries(prefix string) sqlstore.SingletonQueries {
	r := strings.NewReplacer("{t}", prefix+"_singletons", "{now}", "clock_timestamp()", "{leases}", prefix+"_leases",
		"{member}", sqlstore.MemberLeasePrefix, "{tl}", timelineBase)
	cols := `state, state_saved_at, heartbeat_at, holder_id, lease_epoch, started_at, restarts, spec, spec_hash, paused,
	failures, last_error, last_error_at, node_id, node_epoch, generation, {now}`
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
	last_error_at  timestamptz,
	` + sqlstore.ColumnsDDL(placementColumns) + `
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
		Columns: append([]sqlstore.Column{
			{Table: prefix + "_singletons", Name: "failures", Add: r.Replace(`ALTER TABLE {t} ADD COLUMN IF NOT EXISTS failures bigint NOT NULL DEFAULT 0`)},
			{Table: prefix + "_singletons", Name: "last_error", Add: r.Replace(`ALTER TABLE {t} ADD COLUMN IF NOT EXISTS last_error text`)},
			{Table: prefix + "_singletons", Name: "last_error_at", Add: r.Replace(`ALTER TABLE {t} ADD COLUMN IF NOT EXISTS last_error_at timestamptz`)},
		}, sqlstore.AddColumns(prefix+"_singletons", r.Replace(`ALTER TABLE {t} ADD COLUMN IF NOT EXISTS `), placementColumns)...),
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

		// Placement by node (sqlstore/placement.go). Candidates are locked
		// SKIP LOCKED, so that nodes placing at once take different ones;
		// a row another node placed after this statement's snapshot is
		// checked again in its new version (see live).
		// The generation folds in the timeline as lease epochs do
		// (timeline.go), so that it grows across a failover too.
		Place: r.Replace(`WITH n AS (SELECT clock_timestamp() AS now, {tl} AS tl),
c AS (
	SELECT s.name FROM {t} AS s, n
	WHERE NOT s.paused AND s.name IN (SELECT json_array_elements_text($3::json))
		AND NOT ` + live("s", "n.now", "n.tl") + `
		AND EXISTS (SELECT 1 FROM {leases} AS m WHERE m.lease_name = '{member}' || $1::text AND m.holder_id = $1
			AND m.lease_epoch = $2 AND m.expires_at > n.now AND m.lease_epoch >= n.tl)
	ORDER BY s.name LIMIT $4
	FOR UPDATE OF s SKIP LOCKED
)
UPDATE {t} AS s SET node_id = $1, node_epoch = $2, generation = GREATEST(GREATEST(s.generation, s.lease_epoch) + 1, n.tl | 1)
FROM c, n WHERE s.name = c.name AND NOT ` + live("s", "n.now", "n.tl") + ``),
		Give: r.Replace(`WITH n AS (SELECT clock_timestamp() AS now, {tl} AS tl),
d AS (SELECT m.lease_epoch FROM {leases} AS m, n WHERE m.lease_name = '{member}' || $1::text AND m.holder_id = $1
	AND m.expires_at > n.now AND m.lease_epoch >= n.tl)
UPDATE {t} AS s SET node_id = $1, node_epoch = d.lease_epoch,
	generation = GREATEST(GREATEST(s.generation, s.lease_epoch) + 1, n.tl | 1)
FROM n, d
WHERE s.name IN (SELECT json_array_elements_text($4::json)) AND s.node_id = $2 AND s.node_epoch = $3
	AND EXISTS (SELECT 1 FROM {leases} AS m WHERE m.lease_name = '{member}' || $2::text AND m.holder_id = $2
		AND m.lease_epoch = $3 AND m.expires_at > n.now AND m.lease_epoch >= n.tl)`),
		Assigned: r.Replace(`SELECT name, generation FROM {t} WHERE node_id = $1 AND node_epoch = $2 ORDER BY name`),
		Placement: r.Replace(`WITH n AS (SELECT clock_timestamp() AS now, {tl} AS tl)
SELECT m.holder_id, m.lease_epoch,
	(SELECT count(*) FROM {t} AS s WHERE s.node_id = m.holder_id AND s.node_epoch = m.lease_epoch AND NOT s.paused),
	m.expires_at, n.now
FROM {leases} AS m, n
WHERE m.lease_name LIKE '{member}%' AND m.lease_name = '{member}' || m.holder_id AND m.expires_at > n.now AND m.lease_epoch >= n.tl
UNION ALL
SELECT NULL, 0, (SELECT count(*) FROM {t} AS s WHERE NOT s.paused AND NOT ` + live("s", "n.now", "n.tl") + `), NULL, n.now FROM n`),
		StartAssigned: r.Replace(`UPDATE {t} AS s SET holder_id = $1, lease_epoch = $2, started_at = n.now, heartbeat_at = n.now,
	restarts = CASE WHEN s.started_at IS NULL THEN s.restarts ELSE s.restarts + 1 END
FROM (SELECT clock_timestamp() AS now, {tl} AS tl) AS n
WHERE s.name = $3 AND s.node_id = $4 AND s.generation = $5 AND ` + live("s", "n.now", "n.tl")),
		// StartMany: StartAssigned of a batch, one statement; p is
		// joined by name, so a row is updated once.
		StartMany: r.Replace(`UPDATE {t} AS s SET holder_id = $1, lease_epoch = s.generation, started_at = n.now, heartbeat_at = n.now,
	restarts = CASE WHEN s.started_at IS NULL THEN s.restarts ELSE s.restarts + 1 END
FROM (SELECT clock_timestamp() AS now, {tl} AS tl) AS n, json_to_recordset($2::json) AS p(n text, g bigint)
WHERE s.name = p.n AND s.node_id = $1 AND s.generation = p.g AND ` + live("s", "n.now", "n.tl") + `
RETURNING s.name, s.state`),
		FailAssigned: r.Replace(`UPDATE {t} AS s SET last_error = $1, last_error_at = n.now, failures = (s.failures + 1) * $2::bigint
FROM (SELECT clock_timestamp() AS now, {tl} AS tl) AS n
WHERE s.name = $3 AND s.holder_id = $4 AND s.lease_epoch = $5 AND ` + assigned),
		SaveAssigned: r.Replace(`UPDATE {t} AS s SET state = $1, state_saved_at = n.now, heartbeat_at = n.now
FROM (SELECT clock_timestamp() AS now, {tl} AS tl) AS n
WHERE s.name = $2 AND s.holder_id = $3 AND s.lease_epoch = $4 AND ` + assigned),
		HeartbeatAssigned: r.Replace(`UPDATE {t} AS s SET heartbeat_at = n.now
FROM (SELECT clock_timestamp() AS now, {tl} AS tl) AS n
WHERE s.name = $1 AND s.holder_id = $2 AND s.lease_epoch = $3 AND ` + assigned),
	}
}

// placementColumns are the singleton's assignment (sqlstore.SingletonQueries,
// "Placement by node").
var placementColumns = [][2]string{
	{"node_id", "text"},
	{"node_epoch", "bigint NOT NULL DEFAULT 0"},
	{"generation", "bigint NOT NULL DEFAULT 0"},
}

// live is the condition that the assignment of row s is live at now: its
// node's member lease is live under node_epoch, and of the current
// timeline tl (a term of an older one may be acting on writes this
// primary never saw: timeline.go).
//
// It is a scalar subquery, not EXISTS: the planner turns [NOT] EXISTS
// into a semi- or anti-join, and when an UPDATE (or FOR UPDATE) meets a
// row another transaction changed after its snapshot, READ COMMITTED
// checks the row's new version again with the joined rows it had found
// (none, for an anti-join) — so a singleton another node had just placed
// was placed a second time (the conformance suite's race found it). A
// subquery is evaluated again with the new version's node.
func live(s, now, tl string) string {
	return `COALESCE((SELECT true FROM {leases} AS l WHERE l.lease_name = '{member}' || ` + s + `.node_id AND l.holder_id = ` + s + `.node_id
		AND l.lease_epoch = ` + s + `.node_epoch AND l.expires_at > ` + now + ` AND l.lease_epoch >= ` + tl + `), false)`
}

// assigned is the fence of a running singleton's writes: the row's run
// (holder_id, lease_epoch) is its assignment (node_id, generation), and
// the assignment is live.
var assigned = `s.node_id = s.holder_id AND s.generation = s.lease_epoch AND ` + live("s", "n.now", "n.tl")
