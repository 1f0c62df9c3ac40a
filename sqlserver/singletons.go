package sqlserver

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// singletonQueries returns the singleton statements for the table prefix.
func singletonQueries(prefix string) sqlstore.SingletonQueries {
	t := prefix + "_singletons"
	r := strings.NewReplacer("{t}", quote(t), "{pk}", quote(t+"_pk"), "{failures_df}", quote(t+"_failures_df"), "{now}", "SYSUTCDATETIME()", "{n}", nowTable, "{bin}", binary)
	cols := `state, state_saved_at, heartbeat_at, holder_id, lease_epoch, started_at, restarts, spec, spec_hash, paused,
	failures, last_error, last_error_at, {now}`
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
	CONSTRAINT {pk} PRIMARY KEY (name)
)`)},
		// failures, last_error, last_error_at: why a singleton's runs end
		// (status failing); tables of earlier versions lack them.
		Columns: []sqlstore.Column{
			{Table: quote(t), Name: "failures", Add: r.Replace(`ALTER TABLE {t} ADD failures bigint NOT NULL CONSTRAINT {failures_df} DEFAULT 0`)},
			{Table: quote(t), Name: "last_error", Add: r.Replace(`ALTER TABLE {t} ADD last_error nvarchar(max)`)},
			{Table: quote(t), Name: "last_error_at", Add: r.Replace(`ALTER TABLE {t} ADD last_error_at datetime2(7)`)},
		},
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
	}
}
