package mysql

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// revokedQueries returns the revoked dashboard sessions' statements for the
// table prefix. MySQL has no CREATE INDEX IF NOT EXISTS: the index is part
// of the table.
func revokedQueries(prefix string) sqlstore.RevokedQueries {
	r := strings.NewReplacer("{t}", "`"+prefix+"_revoked_sessions`", "{options}", tableOptions)
	return sqlstore.RevokedQueries{
		Migrations: []string{r.Replace(`CREATE TABLE IF NOT EXISTS {t} (
	id         varchar(64) NOT NULL PRIMARY KEY,
	expires_at datetime(6) NOT NULL,
	KEY expires_at (expires_at)
) {options}`)},
		Insert: r.Replace(`INSERT IGNORE INTO {t} (id, expires_at) VALUES (?, ` + plusMS(now, "?") + `)`),
		Check:  r.Replace(`SELECT 1 FROM {t} WHERE id = ? AND expires_at > ` + now),
		Prune:  r.Replace(`DELETE FROM {t} WHERE expires_at <= ` + now),
	}
}
