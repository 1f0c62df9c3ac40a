package postgres

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// revokedQueries returns the revoked dashboard sessions' statements for the
// table prefix.
func revokedQueries(prefix string) sqlstore.RevokedQueries {
	r := strings.NewReplacer("{t}", prefix+"_revoked_sessions", "{ms}", "::bigint * interval '1 millisecond'")
	return sqlstore.RevokedQueries{
		Migrations: []string{
			r.Replace(`CREATE TABLE IF NOT EXISTS {t} (
	id         varchar(64) PRIMARY KEY,
	expires_at timestamptz NOT NULL
)`),
			r.Replace(`CREATE INDEX IF NOT EXISTS {t}_expires ON {t} (expires_at)`),
		},
		Insert: r.Replace(`INSERT INTO {t} (id, expires_at) VALUES ($1, clock_timestamp() + $2{ms}) ON CONFLICT DO NOTHING`),
		Check:  r.Replace(`SELECT 1 FROM {t} WHERE id = $1 AND expires_at > clock_timestamp()`),
		Prune:  r.Replace(`DELETE FROM {t} WHERE expires_at <= clock_timestamp()`),
	}
}
