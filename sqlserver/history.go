package sqlserver

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// historyQueries returns the leadership history's statements for the table
// prefix.
func historyQueries(prefix string) sqlstore.HistoryQueries {
	t := prefix + "_lease_history"
	r := strings.NewReplacer("{t}", quote(t), "{pk}", quote(t+"_pk"), "{bin}", binary)
	index := func(name, def string) string {
		return "IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'" + quote(t) + "', N'U') AND name = N'" + name + "')\n" +
			strings.ReplaceAll(def, "{name}", quote(name))
	}
	return sqlstore.HistoryQueries{
		Migrations: []string{
			r.Replace(`IF OBJECT_ID(N'{t}', N'U') IS NULL
CREATE TABLE {t} (
	id          bigint IDENTITY(1,1) NOT NULL,
	lease_name  nvarchar(128) {bin} NOT NULL,
	event       nvarchar(16)  NOT NULL,
	holder_id   nvarchar(128) {bin} NOT NULL,
	lease_epoch bigint        NOT NULL,
	reason      nvarchar(max) NOT NULL,
	event_at    datetime2(7)  NOT NULL,
	CONSTRAINT {pk} PRIMARY KEY (id)
)`),
			// Pages are read newest first per lease; retention by time.
			r.Replace(index(t+"_lease", `CREATE INDEX {name} ON {t} (lease_name, id DESC)`)),
			r.Replace(index(t+"_at", `CREATE INDEX {name} ON {t} (event_at)`)),
		},
		Insert: r.Replace(`INSERT INTO {t} (lease_name, event, holder_id, lease_epoch, reason, event_at)
VALUES (@p1, @p2, @p3, @p4, @p5, ` + addMS("-"+msParam("@p6"), "SYSUTCDATETIME()") + `)`),
		Page: r.Replace(`SELECT TOP (@p3) id, event, holder_id, lease_epoch, event_at, reason FROM {t}
WHERE lease_name = @p1 AND id < @p2 ORDER BY id DESC`),
		Prune: r.Replace(`DELETE FROM {t} WHERE event_at < ` + addMS("-"+msParam("@p1"), "SYSUTCDATETIME()")),
	}
}
