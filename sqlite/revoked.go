package sqlite

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// revokedQueries returns the revoked dashboard sessions' statements for the
// table prefix.
func revokedQueries(prefix string) sqlstore.RevokedQueries {
	r := strings.NewReplacer("{t}", prefix+"_revoked_sessions", "{now}", now)
	return sqlstore.RevokedQueries{
		Migrations: []string{
			r.Replace(`CREATE TABLE IF NOT EXISTS {t} (
	id         TEXT NOT NULL PRIMARY KEY,
	expires_at TEXT NOT NULL
)`),
			r.Replace(`CREATE INDEX IF NOT EXISTS {t}_expires ON {t} (expires_at)`),
		},
		Insert: r.Replace(`INSERT INTO {t} (id, expires_at) VALUES (?1, ` + nowPlus("?2") + `) ON CONFLICT DO NOTHING`),
		Check:  r.Replace(`SELECT 1 FROM {t} WHERE id = ?1 AND expires_at > {now}`),
		Prune:  r.Replace(`DELETE FROM {t} WHERE expires_at <= {now}`),
	}
}
