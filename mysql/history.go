package mysql

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// historyQueries returns the leadership history's statements for the table
// prefix. MySQL has no CREATE INDEX IF NOT EXISTS: the indexes are part of
// the table.
func historyQueries(prefix string) sqlstore.HistoryQueries {
	r := strings.NewReplacer("{t}", "`"+prefix+"_lease_history`", "{options}", tableOptions)
	return sqlstore.HistoryQueries{
		Migrations: []string{r.Replace(`CREATE TABLE IF NOT EXISTS {t} (
	id          bigint       NOT NULL AUTO_INCREMENT PRIMARY KEY,
	lease_name  varchar(128) NOT NULL,
	event       varchar(16)  NOT NULL,
	holder_id   varchar(128) NOT NULL,
	lease_epoch bigint       NOT NULL,
	reason      text         NOT NULL,
	event_at    datetime(6)  NOT NULL,
	KEY lease (lease_name, id),
	KEY event_at (event_at)
) {options}`)},
		Insert: r.Replace(`INSERT INTO {t} (lease_name, event, holder_id, lease_epoch, reason, event_at)
VALUES (?, ?, ?, ?, ?, ` + plusMS(now, "-?") + `)`),
		Page: r.Replace(`SELECT id, event, holder_id, lease_epoch, event_at, reason FROM {t}
WHERE lease_name = ? AND id < ? ORDER BY id DESC LIMIT ?`),
		Prune: r.Replace(`DELETE FROM {t} WHERE event_at < ` + plusMS(now, "-?")),
	}
}
