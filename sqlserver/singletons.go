package sqlserver

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// singletonQueries returns the singleton statements for the table prefix.
func singletonQueries(prefix string) sqlstore.SingletonQueries {
	t := prefix + "_singletons"
	r := strings.NewReplacer("{t}", quote(t), "{pk}", quote(t+"_pk"), "{failures_df}", quote(t+"_failures_df"), "{now}", "SYSUTCDATETIME()", "{n}", nowTable, "{bin}", binary,
		"{leases}", quote(prefix+"_leases"), "{member}", sqlstore.MemberLeasePrefix,
		"{node_epoch_df}", quote(t+"_node_epoch_df"), "{generation_df}", quote(t+"_generation_df"))
	placementColumns := [][2]string{
		{"node_id", r.Replace("nvarchar(128) {bin}")},
		{"node_epoch", r.Replace("bigint NOT NULL CONSTRAINT {node_epoch_df} DEFAULT 0")},
		{"generation", r.Replace("bigint NOT NULL CONSTRAINT {generation_df} DEFAULT 0")},
	}
	cols := `state, state_saved_at, heartbeat_at, holder_id, lease_epoch, started_at, restarts, spec, spec_hash, paused,
	failures, last_error, last_error_at, node_id, node_epoch, generation, {now}`
	return sqlstore.SingletonQueries{
		Migrations: []string{r.Replace(`IF OBJECT_ID(N'{t}', N'U') IS NULL
CREATE TABLE {t} (
	name           nvarchar(128) {bin} NOT NULL,
	state          nvarchar(max),
	state_saved_at datetime2(7),
	heartbeat_at   datetime2(7),
	holder_id      nvarchar(128) {bin},
	lease_epoch    bigint         NOT NULL DEFAULT 0,
	started_at     datetime2(7),
	restarts       bigint         NOT NULL DEFAULT 0,
	spec           nvarchar(max),
	spec_hash      nvarchar(64),
	paused         bit NOT NULL DEFAULT 0,
	created_at     datetime2(7)   NOT NULL,
	failures       bigint         NOT NULL CONSTRAINT {failures_df} DEFAULT 0,
	last_error     nvarchar(max),
	last_error_at  datetime2(7),
	` + sqlstore.ColumnsDDL(placementColumns) + `,
	CONSTRAINT {pk} PRIMARY KEY (name)
)`)},
		// failures, last_error, last_error_at: why a singleton's runs end
		// (status failing); tables of earlier versions lack them.
		Columns: append([]sqlstore.Column{
			{Table: quote(t), Name: "failures", Add: r.Replace(`ALTER TABLE {t} ADD failures bigint NOT NULL CONSTRAINT {failures_df} DEFAULT 0`)},
			{Table: quote(t), Name: "last_error", Add: r.Replace(`ALTER TABLE {t} ADD last_error nvarchar(max)`)},
			{Table: quote(t), Name: "last_error_at", Add: r.Replace(`ALTER TABLE {t} ADD last_error_at datetime2(7)`)},
		}, sqlstore.AddColumns(quote(t), r.Replace(`ALTER TABLE {t} ADD `), placementColumns)...),
		// A concurrent insert of the same name fails with a unique
		// violation, which EnsureSingleton treats as done.
		Ensure: r.Replace(`IF NOT EXISTS (SELECT 1 FROM {t} WITH (UPDLOCK, HOLDLOCK) WHERE name = @p1) INSERT INTO {t} (name, created_at) VALUES (@p1, {now})`),
		Get:    r.Replace(`SELECT ` + cols + ` FROM {t} WHERE name = @p1`),
		List:   r.Replace(`SELECT name, ` + cols + ` FROM {t} ORDER BY name`),
		Page:   r.Replace(`SELECT TOP (@p2) name, ` + cols + ` FROM {t} WHERE spec IS NOT NULL AND name > @p1 ORDER BY name`),
		// One clock reading per statement.
		Start: r.Replace(`UPDATE s SET holder_id = @p1, lease_epoch = @p2, started_at = n.now, heartbeat_at = n.now,
	restarts = CASE WHEN s.started_at IS NULL THEN s.restarts ELSE s.restarts + 1 END
FROM {t} AS s CROSS JOIN {n} AS n WHERE s.name = @p3`),
		Fail: r.Replace(`UPDATE {t} SET last_error = @p1, last_error_at = {now}, failures = (failures + 1) * @p2
WHERE name = @p3 AND holder_id = @p4 AND lease_epoch = @p5`),
		Save: r.Replace(`UPDATE s SET state = @p1, state_saved_at = n.now, heartbeat_at = n.now
FROM {t} AS s CROSS JOIN {n} AS n WHERE s.name = @p2 AND s.holder_id = @p3 AND s.lease_epoch = @p4`),
		Create:    r.Replace(`INSERT INTO {t} (name, spec, spec_hash, created_at) VALUES (@p1, @p2, @p3, {now})`),
		SetPaused: r.Replace(`UPDATE {t} SET paused = @p1 WHERE name = @p2 AND spec IS NOT NULL`),
		Delete:    r.Replace(`DELETE FROM {t} WHERE name = @p1 AND spec IS NOT NULL`),
		Heartbeat: r.Replace(`UPDATE {t} SET heartbeat_at = {now} WHERE name = @p1 AND holder_id = @p2 AND lease_epoch = @p3`),

		// Placement by node (sqlstore/placement.go). The candidates are
		// taken with UPDLOCK, READPAST (nodes placing at once take
		// different ones), the member leases read under REPEATABLEREAD so
		// that a lease cannot be renewed or taken between the check and
		// the commit. One clock reading per statement ({n}).
		Place: r.Replace(`WITH c AS (
	SELECT TOP (@p4) s.node_id, s.node_epoch, s.generation, s.lease_epoch
	FROM {t} AS s WITH (UPDLOCK, READPAST, ROWLOCK) CROSS JOIN {n} AS n
	WHERE s.paused = 0 AND s.name IN (SELECT value FROM OPENJSON(@p3))
		AND NOT ` + live("s") + `
		AND EXISTS (SELECT 1 FROM {leases} AS m WITH (REPEATABLEREAD, ROWLOCK) WHERE m.lease_name = N'{member}' + @p1
			AND m.holder_id = @p1 AND m.lease_epoch = @p2 AND m.expires_at > n.now)
	ORDER BY s.name
)
UPDATE c SET node_id = @p1, node_epoch = @p2, generation = CASE WHEN generation > lease_epoch THEN generation ELSE lease_epoch END + 1`),
		Give: r.Replace(`UPDATE s SET node_id = @p1, node_epoch = d.lease_epoch,
	generation = CASE WHEN s.generation > s.lease_epoch THEN s.generation ELSE s.lease_epoch END + 1
FROM {t} AS s CROSS JOIN {n} AS n
JOIN {leases} AS d WITH (REPEATABLEREAD, ROWLOCK) ON d.lease_name = N'{member}' + @p1 AND d.holder_id = @p1 AND d.expires_at > n.now
JOIN {leases} AS m WITH (REPEATABLEREAD, ROWLOCK) ON m.lease_name = N'{member}' + @p2 AND m.holder_id = @p2 AND m.lease_epoch = @p3
	AND m.expires_at > n.now
WHERE s.node_id = @p2 AND s.node_epoch = @p3 AND s.name IN (SELECT value FROM OPENJSON(@p4))`),
		Assigned: r.Replace(`SELECT name, generation FROM {t} WHERE node_id = @p1 AND node_epoch = @p2 ORDER BY name`),
		Placement: r.Replace(`SELECT x.holder_id, x.lease_epoch, x.assigned, x.expires_at, n.now
FROM {n} AS n CROSS APPLY (
	SELECT m.holder_id, m.lease_epoch,
		(SELECT COUNT_BIG(*) FROM {t} AS s WHERE s.node_id = m.holder_id AND s.node_epoch = m.lease_epoch AND s.paused = 0) AS assigned,
		m.expires_at
	FROM {leases} AS m
	WHERE m.lease_name LIKE N'{member}%' AND m.lease_name = N'{member}' + m.holder_id AND m.expires_at > n.now
	UNION ALL
	SELECT NULL, 0, (SELECT COUNT_BIG(*) FROM {t} AS s WHERE s.paused = 0 AND NOT ` + live("s") + `), NULL
) AS x`),
		StartAssigned: r.Replace(`UPDATE s SET holder_id = @p1, lease_epoch = @p2, started_at = n.now, heartbeat_at = n.now,
	restarts = CASE WHEN s.started_at IS NULL THEN s.restarts ELSE s.restarts + 1 END
FROM {t} AS s CROSS JOIN {n} AS n WHERE s.name = @p3 AND s.node_id = @p4 AND s.generation = @p5 AND ` + live("s")),
		// StartMany: the pairs' keys n and g are OPENJSON's default
		// paths; the name compared in the column's binary collation.
		StartMany: r.Replace(`UPDATE s SET holder_id = @p1, lease_epoch = s.generation, started_at = n.now, heartbeat_at = n.now,
	restarts = CASE WHEN s.started_at IS NULL THEN s.restarts ELSE s.restarts + 1 END
OUTPUT inserted.name, inserted.state
FROM {t} AS s CROSS JOIN {n} AS n
JOIN OPENJSON(@p2) WITH (n nvarchar(128), g bigint) AS p ON s.name = p.n {bin} AND s.generation = p.g
WHERE s.node_id = @p1 AND ` + live("s")),
		FailAssigned: r.Replace(`UPDATE s SET last_error = @p1, last_error_at = n.now, failures = (s.failures + 1) * @p2
FROM {t} AS s CROSS JOIN {n} AS n WHERE s.name = @p3 AND s.holder_id = @p4 AND s.lease_epoch = @p5 AND ` + assigned),
		SaveAssigned: r.Replace(`UPDATE s SET state = @p1, state_saved_at = n.now, heartbeat_at = n.now
FROM {t} AS s CROSS JOIN {n} AS n WHERE s.name = @p2 AND s.holder_id = @p3 AND s.lease_epoch = @p4 AND ` + assigned),
		HeartbeatAssigned: r.Replace(`UPDATE s SET heartbeat_at = n.now
FROM {t} AS s CROSS JOIN {n} AS n WHERE s.name = @p1 AND s.holder_id = @p2 AND s.lease_epoch = @p3 AND ` + assigned),
	}
}

// live is the condition that the assignment of row s is live at n.now: its
// node's member lease is live under node_epoch, read under REPEATABLEREAD
// so that it stays so until the statement's transaction ends.
func live(s string) string {
	return `EXISTS (SELECT 1 FROM {leases} AS l WITH (REPEATABLEREAD, ROWLOCK) WHERE l.lease_name = N'{member}' + ` + s + `.node_id
		AND l.holder_id = ` + s + `.node_id AND l.lease_epoch = ` + s + `.node_epoch AND l.expires_at > n.now)`
}

// assigned is the fence of a running singleton's writes: the row's run
// (holder_id, lease_epoch) is its assignment (node_id, generation), and
// the assignment is live.
var assigned = `s.node_id = s.holder_id AND s.generation = s.lease_epoch AND ` + live("s")
