package sqlserver

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// revokedQueries returns the revoked dashboard sessions' statements for the
// table prefix. A second sign-out of one session may race the first into
// a duplicate key, which RevokeSession takes for success.
func revokedQueries(prefix string) sqlstore.RevokedQueries {
	t := prefix + "_revoked_sessions"
	r := strings.NewReplacer("{t}", quote(t), "{pk}", quote(t+"_pk"), "{bin}", binary)
	return sqlstore.RevokedQueries{
		Migrations: []string{
			r.Replace(`IF OBJECT_ID(N'{t}', N'U') IS NULL
CREATE TABLE {t} (
	id         nvarchar(64) {bin} NOT NULL,
	expires_at datetime2(7) NOT NULL,
	CONSTRAINT {pk} PRIMARY KEY (id)
)`),
			r.Replace(`IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'{t}', N'U') AND name = N'` + t + `_expires')
CREATE INDEX ` + quote(t+"_expires") + ` ON {t} (expires_at)`),
		},
		Insert: r.Replace(`INSERT INTO {t} (id, expires_at) SELECT @p1, ` + addMS(msParam("@p2"), "SYSUTCDATETIME()") + `
WHERE NOT EXISTS (SELECT 1 FROM {t} WHERE id = @p1)`),
		Check: r.Replace(`SELECT 1 FROM {t} WHERE id = @p1 AND expires_at > SYSUTCDATETIME()`),
		Prune: r.Replace(`DELETE FROM {t} WHERE expires_at <= SYSUTCDATETIME()`),
	}
}
