package dbtime_test

import (
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/dbtime"
)

// Every form a driver hands over reads as the same instant in UTC; NULL is
// null; anything else is an error.
func TestScan(t *testing.T) {
	want := time.Date(2026, 11, 28, 8, 30, 1, 250000000, time.UTC)
	berlin := time.FixedZone("CET", 3600)
	for _, tc := range []struct {
		v       any
		want    time.Time
		null    bool
		wantErr bool
	}{
		{v: want.In(berlin), want: want},                   // pgx, mssql, mysql with parseTime
		{v: "2026-11-28 08:30:01.25", want: want},          // SQLite's own form
		{v: []byte("2026-11-28T08:30:01.25Z"), want: want}, // RFC 3339, as bytes (mysql without parseTime)
		{v: "2026-11-28 09:30:01.25+01:00", want: want},    // with its offset
		{v: "2026-11-28T08:30:01.25", want: want},          // ISO without a zone: UTC
		{v: nil, null: true},                               // NULL
		{v: "yesterday", wantErr: true},                    // no layout
		{v: int64(1764318601), wantErr: true},              // a number is no timestamp
	} {
		got, null, err := dbtime.Scan(tc.v)
		if (err != nil) != tc.wantErr || null != tc.null || !got.Equal(tc.want) {
			t.Errorf("Scan(%#v) = %v, null %v, err %v; want %v, null %v, error %v", tc.v, got, null, err, tc.want, tc.null, tc.wantErr)
		}
		if err == nil && got.Location() != time.UTC {
			t.Errorf("Scan(%#v) = %v, not in UTC", tc.v, got)
		}
	}
}
