package sqlstore

import (
	"fmt"
	"time"

	"github.com/sqlease/sqlease/internal/dbtime"
)

// dbTime scans a database timestamp whatever the driver hands over: a
// time.Time (pgx, mssql, mysql with parseTime) or text (SQLite). Values are
// normalised to UTC; they come from the database clock, never carry a
// monotonic reading, and are only compared with other database times.
type dbTime struct{ T time.Time }

// Scan implements sql.Scanner; a NULL is an error.
func (d *dbTime) Scan(v any) error {
	t, null, err := dbtime.Scan(v)
	switch {
	case err != nil:
		return fmt.Errorf("sqlstore: %w", err)
	case null:
		return fmt.Errorf("sqlstore: NULL timestamp")
	}
	d.T = t
	return nil
}
