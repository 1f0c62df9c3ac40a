// Package dbtime reads a database timestamp whatever the driver hands over:
// a time.Time (pgx, mssql, mysql with parseTime) or text (SQLite, mysql
// without parseTime). It is the one such reader of the store (sqlstore) and
// of the test house's checkers (internal/ledger).
package dbtime

import (
	"fmt"
	"time"
)

// layouts are the text forms SQLite and some drivers produce.
var layouts = []string{
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999",
}

// Scan returns the timestamp v in UTC; null is true, with the zero time,
// when v is NULL. Anything else but a time.Time or its text is an error.
func Scan(v any) (t time.Time, null bool, err error) {
	switch x := v.(type) {
	case time.Time:
		return x.UTC(), false, nil
	case string:
		t, err = parse(x)
		return t, false, err
	case []byte:
		t, err = parse(string(x))
		return t, false, err
	case nil:
		return time.Time{}, true, nil
	}
	return time.Time{}, false, fmt.Errorf("cannot scan %T as a timestamp", v)
}

func parse(s string) (time.Time, error) {
	for _, layout := range layouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("cannot parse timestamp %q", s)
}
