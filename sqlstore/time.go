package sqlstore

import (
	"fmt"
	"time"
)

// dbTime scans a database timestamp whatever the driver hands over: a
// time.Time (pgx, mssql, mysql with parseTime) or text (SQLite). Values are
// normalised to UTC; they come from the database clock, never carry a
// monotonic reading, and are only compared with other database times.
type dbTime struct{ T time.Time }

// textLayouts are the text forms SQLite and some drivers produce.
var textLayouts = []string{
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999",
}

func (d *dbTime) Scan(v any) error {
	switch x := v.(type) {
	case time.Time:
		d.T = x.UTC()
		return nil
	case string:
		return d.parse(x)
	case []byte:
		return d.parse(string(x))
	case nil:
		return fmt.Errorf("sqlstore: NULL timestamp")
	}
	return fmt.Errorf("sqlstore: cannot scan %T as a timestamp", v)
}

func (d *dbTime) parse(s string) error {
	for _, layout := range textLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			d.T = t.UTC()
			return nil
		}
	}
	return fmt.Errorf("sqlstore: cannot parse timestamp %q", s)
}
