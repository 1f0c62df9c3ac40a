package sqlserver

import (
	"math"
	"testing"
	"time"

	"github.com/golang-sql/civil"
)

// TestTimeArg: time parameters go to the driver as datetime2 (civil) in
// UTC, to 100ns as the columns keep them.
func TestTimeArg(t *testing.T) {
	paris := time.FixedZone("CEST", 2*60*60)
	in := time.Date(2026, 5, 4, 14, 30, 15, 123456789, paris)
	got, ok := timeArg(in).(civil.DateTime)
	if !ok {
		t.Fatalf("timeArg = %T, want civil.DateTime (sent as datetime2)", timeArg(in))
	}
	want := civil.DateTime{Date: civil.Date{Year: 2026, Month: 5, Day: 4}, Time: civil.Time{Hour: 12, Minute: 30, Second: 15, Nanosecond: 123456789}}
	if got != want {
		t.Errorf("timeArg(%s) = %v, want the UTC wall clock %v", in, got, want)
	}
}

// TestAddMS: T-SQL's / and % truncate toward zero like Go's, so the
// seconds and the remainder addMS adds give back the count, and for any
// count up to MaxDuration both fit DATEADD's int.
func TestAddMS(t *testing.T) {
	maxMS := MaxDuration.Milliseconds()
	for _, ms := range []int64{0, 1, 999, 1000, 1001, -1, -1500, 24*24*3600*1000 + 1, math.MaxInt32, math.MaxInt32 + 1, maxMS, -maxMS} {
		sec, rem := ms/1000, ms%1000
		if sec*1000+rem != ms {
			t.Errorf("%d ms: %d s + %d ms does not add up", ms, sec, rem)
		}
		if sec > math.MaxInt32 || sec < math.MinInt32 || rem > 999 || rem < -999 {
			t.Errorf("%d ms: %d s or %d ms does not fit an int", ms, sec, rem)
		}
	}
	if (maxMS/1000 + 1) <= math.MaxInt32 {
		t.Errorf("MaxDuration is not the longest duration that fits")
	}
	const want = "DATEADD(millisecond, CAST((X) % 1000 AS int), DATEADD(second, CAST((X) / 1000 AS int), T))"
	if got := addMS("X", "T"); got != want {
		t.Errorf("addMS = %s, want %s", got, want)
	}
}

func TestQualify(t *testing.T) {
	if got, want := qualify("i.", "a, b,\nc,d"), "i.a, i.b, i.c, i.d"; got != want {
		t.Errorf("qualify = %q, want %q", got, want)
	}
}

func TestSplitParts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		odbc bool
		want []string
	}{
		{"a=1;b=2", false, []string{"a=1", "b=2"}},
		{`a="x;y""z";b=2;`, false, []string{`a="x;y""z"`, "b=2", ""}},
		{"a={x;y}}z};b=2", true, []string{"a={x;y}}z}", "b=2"}},
		{"a= {x;y} ;b=2", true, []string{"a= {x;y} ", "b=2"}},
		{"a=x=y;b", true, []string{"a=x=y", "b"}},
	} {
		got := splitParts(tc.in, tc.odbc)
		if len(got) != len(tc.want) {
			t.Errorf("splitParts(%q) = %q, want %q", tc.in, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("splitParts(%q) = %q, want %q", tc.in, got, tc.want)
				break
			}
		}
	}
}
