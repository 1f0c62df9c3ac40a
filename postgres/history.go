package postgres

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// historyQueries returns the leadership history's statements for the table
// prefix.
func historyQueries(prefix string) sqlstore.HistoryQueries {
	r := strings.NewReplacer("{t}", prefix+"_lease_history", "{ms}", "::bigint * interval '1 millisecond'")
	return sqlstore.HistoryQueries{
		Migrations: []string{
			r.Replace(`CREATE TABLE IF NOT EXISTS {t} (
	id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	lease_name  varchar(128) NOT NULL,
	event       varchar(16)  NOT NULL,
	holder_id   varchar(128) NOT NULL,
	lease_epoch bigint       NOT NULL,
	reason      text         NOT NULL,
	event_at    timestamptz  NOT NULL
)`),
			// Pages are read newest first per lease; retention by time.
			r.Replace(`CREATE INDEX IF NOT EXISTS {t}_lease ON {t} (lease_name, id DESC)`),
			r.Replace(`CREATE INDEX IF NOT EXISTS {t}_at ON {t} (event_at)`),
		},
		Insert: r.Replace(`INSERT INTO {t} (lease_name, event, holder_id, lease_epoch, reason, event_at)
VALUES ($1, $2, $3, $4, $5, clock_timestamp() - $6{ms})`),
		Page: r.Replace(`SELECT id, event, holder_id, lease_epoch, event_at, reason FROM {t}
WHERE lease_name = $1 AND id < $2 ORDER BY id DESC LIMIT $3`),
		Prune: r.Replace(`DELETE FROM {t} WHERE event_at < clock_timestamp() - $1{ms}`),
	}
}
