package scheduler_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
)

func scheduleZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("load zone %s: %v", name, err)
	}
	return loc
}

// scheduleSeq returns n successive occurrences after start.
func scheduleSeq(t *testing.T, s sqlease.Schedule, start time.Time, n int) []time.Time {
	t.Helper()
	var out []time.Time
	cur := start
	for range n {
		next, ok := scheduler.Next(s, cur)
		if !ok {
			t.Fatalf("Next(%+v, %s): no occurrence", s, cur)
		}
		if !next.After(cur) {
			t.Fatalf("Next(%+v, %s) = %s, not after", s, cur, next)
		}
		out = append(out, next)
		cur = next
	}
	return out
}

func TestValidateScheduleAccepts(t *testing.T) {
	for _, s := range []sqlease.Schedule{
		{},
		{Every: time.Minute},
		{Every: scheduler.MinEvery},
		{Every: scheduler.MaxEvery},
		{Cron: "0 9 * * 1-5"},
		{Cron: "*/15 * * * *"},
		{Cron: "30 2 * * *", Timezone: "America/New_York"},
		{Cron: "0 0 29 2 *", Timezone: "Europe/Berlin"},
		{Cron: "0 12 * jan,jul mon-fri", Timezone: "UTC"},
		{Cron: "@hourly"}, {Cron: "@daily"}, {Cron: "@midnight"}, {Cron: "@weekly"},
		{Cron: "@monthly"}, {Cron: "@yearly"}, {Cron: "@annually", Timezone: "Asia/Tokyo"},
		{At: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)},
		{At: time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC)}, // past: due at once
	} {
		if err := scheduler.ValidateSchedule(s); err != nil {
			t.Errorf("ValidateSchedule(%+v) = %v, want nil", s, err)
		}
	}
}

func TestValidateScheduleRejects(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		s     sqlease.Schedule
		field string
		rule  string
	}{
		{"every too short", sqlease.Schedule{Every: 50 * time.Millisecond}, "schedule.every", "between 100ms"},
		{"every negative", sqlease.Schedule{Every: -time.Second}, "schedule.every", "between"},
		{"every too long", sqlease.Schedule{Every: scheduler.MaxEvery + 1}, "schedule.every", "between"},
		{"every and cron", sqlease.Schedule{Every: time.Minute, Cron: "@daily"}, "schedule.cron", "only one of every, cron and at"},
		{"every and at", sqlease.Schedule{Every: time.Minute, At: at}, "schedule.at", "only one of"},
		{"cron and at", sqlease.Schedule{Cron: "@daily", At: at}, "schedule.at", "only one of"},
		{"timezone without cron", sqlease.Schedule{Timezone: "Europe/Berlin"}, "schedule.timezone", "only allowed with schedule.cron"},
		{"timezone with every", sqlease.Schedule{Every: time.Minute, Timezone: "UTC"}, "schedule.timezone", "only allowed with schedule.cron"},
		{"timezone with at", sqlease.Schedule{At: at, Timezone: "UTC"}, "schedule.timezone", "only allowed with schedule.cron"},
		{"unknown timezone", sqlease.Schedule{Cron: "@daily", Timezone: "Mars/Olympus_Mons"}, "schedule.timezone", "known IANA time zone"},
		{"host timezone", sqlease.Schedule{Cron: "@daily", Timezone: "Local"}, "schedule.timezone", "Local"},
		{"seconds field", sqlease.Schedule{Cron: "0 30 2 * * *"}, "schedule.cron", "five-field"},
		{"four fields", sqlease.Schedule{Cron: "30 2 * *"}, "schedule.cron", "five-field"},
		{"minute out of range", sqlease.Schedule{Cron: "61 * * * *"}, "schedule.cron", "five-field"},
		{"garbage", sqlease.Schedule{Cron: "every day"}, "schedule.cron", "five-field"},
		{"unknown descriptor", sqlease.Schedule{Cron: "@fortnightly"}, "schedule.cron", "five-field"},
		{"@every", sqlease.Schedule{Cron: "@every 1m"}, "schedule.cron", "schedule.every"},
		{"TZ prefix", sqlease.Schedule{Cron: "TZ=Europe/Berlin 0 9 * * *"}, "schedule.cron", "schedule.timezone"},
		{"CRON_TZ prefix", sqlease.Schedule{Cron: "CRON_TZ=UTC 0 9 * * *"}, "schedule.cron", "schedule.timezone"},
		{"never matches", sqlease.Schedule{Cron: "0 0 30 2 *"}, "schedule.cron", "match some date"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := scheduler.ValidateSchedule(tc.s)
			if err == nil {
				t.Fatalf("ValidateSchedule(%+v) = nil, want an error", tc.s)
			}
			if !errors.Is(err, sqlease.ErrInvalidConfig) {
				t.Errorf("error %q does not wrap ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.field+" ") {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.rule) {
				t.Errorf("error %q does not state the rule %q", err, tc.rule)
			}
		})
	}
}

func TestFirst(t *testing.T) {
	now := time.Date(2026, 4, 15, 9, 0, 0, 0, time.UTC) // a Wednesday
	ny := scheduleZone(t, "America/New_York")
	for _, tc := range []struct {
		name string
		s    sqlease.Schedule
		now  time.Time
		want time.Time
	}{
		{"once", sqlease.Schedule{}, now, now},
		{"every runs at once", sqlease.Schedule{Every: time.Hour}, now, now},
		{"at in the future", sqlease.Schedule{At: now.Add(time.Hour)}, now, now.Add(time.Hour)},
		{"at in the past is due at once", sqlease.Schedule{At: now.Add(-time.Hour)}, now, now.Add(-time.Hour)},
		{"cron strictly after now", sqlease.Schedule{Cron: "0 9 * * *"}, now, now.AddDate(0, 0, 1)},
		{"cron later today", sqlease.Schedule{Cron: "0 9 * * *"}, now.Add(-time.Nanosecond), now},
		{"cron in zone", sqlease.Schedule{Cron: "0 9 * * *", Timezone: "America/New_York"}, now, time.Date(2026, 4, 15, 9, 0, 0, 0, ny)},
		{"cron weekdays from Friday evening", sqlease.Schedule{Cron: "0 9 * * 1-5"}, time.Date(2026, 4, 17, 18, 0, 0, 0, time.UTC), time.Date(2026, 4, 20, 9, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := scheduler.First(tc.s, tc.now)
			if !got.Equal(tc.want) {
				t.Errorf("First = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestNextOneOffHasNone(t *testing.T) {
	now := time.Date(2026, 4, 15, 9, 0, 0, 0, time.UTC)
	for _, s := range []sqlease.Schedule{{}, {At: now}, {Cron: "not cron"}, {Every: -time.Second}} {
		if next, ok := scheduler.Next(s, now); ok {
			t.Errorf("Next(%+v) = %s, true; want no occurrence", s, next)
		}
	}
}

func TestNextEveryDoesNotDrift(t *testing.T) {
	for _, every := range []time.Duration{scheduler.MinEvery, 7*time.Second + 333*time.Millisecond + 17, time.Hour, 24 * time.Hour} {
		s := sqlease.Schedule{Every: every}
		start := time.Date(2026, 3, 1, 0, 0, 0, 123456789, time.UTC)
		cur := start
		for range 10_000 {
			next, ok := scheduler.Next(s, cur)
			if !ok {
				t.Fatalf("every %s: no next", every)
			}
			cur = next
		}
		if want := start.Add(10_000 * every); !cur.Equal(want) {
			t.Errorf("every %s: after 10,000 intervals got %s, want %s (drift %s)", every, cur, want, cur.Sub(want))
		}
	}
}

// TestNextEveryIgnoresZones: every is real elapsed time, also across DST.
func TestNextEveryIgnoresZones(t *testing.T) {
	ny := scheduleZone(t, "America/New_York")
	start := time.Date(2026, 3, 7, 12, 0, 0, 0, ny)
	next, _ := scheduler.Next(sqlease.Schedule{Every: 24 * time.Hour}, start)
	if want := time.Date(2026, 3, 8, 13, 0, 0, 0, ny); !next.Equal(want) {
		t.Errorf("24h after %s = %s, want %s", start, next, want)
	}
}

func TestNextCronDST(t *testing.T) {
	ny := scheduleZone(t, "America/New_York")
	berlin := scheduleZone(t, "Europe/Berlin")
	d := func(loc *time.Location, mo time.Month, day, h, m int) time.Time {
		return time.Date(2026, mo, day, h, m, 0, 0, loc)
	}
	for _, tc := range []struct {
		name  string
		s     sqlease.Schedule
		start time.Time
		want  []time.Time
	}{
		{
			// 2026-03-08 02:00 EST jumps to 03:00 EDT: 02:30 does not
			// exist and runs at the change (robfig/cron alone skips the day).
			name:  "New York spring forward skips 02:30",
			s:     sqlease.Schedule{Cron: "30 2 * * *", Timezone: "America/New_York"},
			start: d(ny, time.March, 6, 12, 0),
			want: []time.Time{
				d(ny, time.March, 7, 2, 30), d(ny, time.March, 8, 3, 0),
				d(ny, time.March, 9, 2, 30), d(ny, time.March, 10, 2, 30),
			},
		},
		{
			// 2026-11-01 02:00 EDT falls back to 01:00 EST: 02:30 happens once.
			name:  "New York fall back, 02:30",
			s:     sqlease.Schedule{Cron: "30 2 * * *", Timezone: "America/New_York"},
			start: d(ny, time.October, 30, 12, 0),
			want: []time.Time{
				d(ny, time.October, 31, 2, 30),
				time.Date(2026, 11, 1, 7, 30, 0, 0, time.UTC), // 02:30 EST
				d(ny, time.November, 2, 2, 30),
			},
		},
		{
			// 01:30 happens twice on 2026-11-01 (EDT, then EST): it runs
			// once, on the first pass (robfig/cron alone runs both).
			name:  "New York fall back, repeated 01:30",
			s:     sqlease.Schedule{Cron: "30 1 * * *", Timezone: "America/New_York"},
			start: d(ny, time.October, 30, 12, 0),
			want: []time.Time{
				d(ny, time.October, 31, 1, 30),
				time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), // 01:30 EDT
				d(ny, time.November, 2, 1, 30),
			},
		},
		{
			// 2026-03-29 02:00 CET jumps to 03:00 CEST.
			name:  "Berlin spring forward",
			s:     sqlease.Schedule{Cron: "30 2 * * *", Timezone: "Europe/Berlin"},
			start: d(berlin, time.March, 27, 12, 0),
			want: []time.Time{
				d(berlin, time.March, 28, 2, 30), d(berlin, time.March, 29, 3, 0),
				d(berlin, time.March, 30, 2, 30),
			},
		},
		{
			// 2026-10-25 03:00 CEST falls back to 02:00 CET: 02:30 twice.
			name:  "Berlin fall back",
			s:     sqlease.Schedule{Cron: "30 2 * * *", Timezone: "Europe/Berlin"},
			start: d(berlin, time.October, 23, 12, 0),
			want: []time.Time{
				d(berlin, time.October, 24, 2, 30),
				time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), // 02:30 CEST
				d(berlin, time.October, 26, 2, 30),
			},
		},
		{
			// A gap matching several times runs once, at the change.
			name:  "several matches in the gap",
			s:     sqlease.Schedule{Cron: "0,20,40 2 * * *", Timezone: "America/New_York"},
			start: d(ny, time.March, 7, 12, 0),
			want:  []time.Time{d(ny, time.March, 8, 3, 0), d(ny, time.March, 9, 2, 0)},
		},
		{
			// Hourly-type expressions follow real time: one run per real
			// hour, none added for the skipped hour.
			name:  "hourly across spring forward",
			s:     sqlease.Schedule{Cron: "30 * * * *", Timezone: "America/New_York"},
			start: d(ny, time.March, 8, 0, 45),
			want:  []time.Time{d(ny, time.March, 8, 1, 30), d(ny, time.March, 8, 3, 30), d(ny, time.March, 8, 4, 30)},
		},
		{
			name:  "hourly across fall back runs both 01:00",
			s:     sqlease.Schedule{Cron: "@hourly", Timezone: "America/New_York"},
			start: time.Date(2026, 11, 1, 4, 30, 0, 0, time.UTC), // 00:30 EDT
			want: []time.Time{
				time.Date(2026, 11, 1, 5, 0, 0, 0, time.UTC), // 01:00 EDT
				time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC), // 01:00 EST
				time.Date(2026, 11, 1, 7, 0, 0, 0, time.UTC), // 02:00 EST
			},
		},
		{
			name:  "weekdays at nine in Berlin, across spring forward",
			s:     sqlease.Schedule{Cron: "0 9 * * 1-5", Timezone: "Europe/Berlin"},
			start: d(berlin, time.March, 26, 10, 0), // Thursday
			want: []time.Time{
				d(berlin, time.March, 27, 9, 0), // Friday, CET
				d(berlin, time.March, 30, 9, 0), // Monday, CEST
				d(berlin, time.March, 31, 9, 0), d(berlin, time.April, 1, 9, 0),
				d(berlin, time.April, 2, 9, 0), d(berlin, time.April, 3, 9, 0),
				d(berlin, time.April, 6, 9, 0),
			},
		},
		{
			name:  "UTC by default",
			s:     sqlease.Schedule{Cron: "0 9 * * 1-5"},
			start: time.Date(2026, 4, 17, 9, 0, 0, 0, time.UTC), // Friday 09:00 exactly
			want:  []time.Time{time.Date(2026, 4, 20, 9, 0, 0, 0, time.UTC)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := scheduleSeq(t, tc.s, tc.start, len(tc.want))
			for i := range got {
				if !got[i].Equal(tc.want[i]) {
					t.Errorf("occurrence %d = %s, want %s", i, got[i], tc.want[i].In(got[i].Location()))
				}
			}
		})
	}
}

// TestNextCronOncePerDayAcrossDST: a daily wall-clock job runs exactly once
// per local date through a whole year of DST changes, in several zones and
// at every hour, including the hours that are skipped or repeated.
func TestNextCronOncePerDayAcrossDST(t *testing.T) {
	for _, zone := range []string{"America/New_York", "Europe/Berlin", "Australia/Sydney", "Australia/Lord_Howe", "UTC"} {
		loc := scheduleZone(t, zone)
		for h := range 24 {
			s := sqlease.Schedule{Cron: "30 " + strconv.Itoa(h) + " * * *", Timezone: zone}
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, loc)
			got := scheduleSeq(t, s, start, 365)
			seen := map[string]bool{}
			for _, o := range got {
				day := o.In(loc).Format(time.DateOnly)
				if seen[day] {
					t.Fatalf("%s %q: two runs on %s", zone, s.Cron, day)
				}
				seen[day] = true
			}
			if last := got[len(got)-1].In(loc).Format(time.DateOnly); last != "2026-12-31" {
				t.Errorf("%s %q: 365th run on %s, want 2026-12-31 (a day was skipped)", zone, s.Cron, last)
			}
		}
	}
}

func TestNextCronDescriptors(t *testing.T) {
	from := time.Date(2026, 4, 15, 10, 20, 0, 0, time.UTC) // a Wednesday
	for _, tc := range []struct {
		cron string
		want time.Time
	}{
		{"@hourly", time.Date(2026, 4, 15, 11, 0, 0, 0, time.UTC)},
		{"@daily", time.Date(2026, 4, 16, 0, 0, 0, 0, time.UTC)},
		{"@midnight", time.Date(2026, 4, 16, 0, 0, 0, 0, time.UTC)},
		{"@weekly", time.Date(2026, 4, 19, 0, 0, 0, 0, time.UTC)}, // Sunday
		{"@monthly", time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)},
		{"@yearly", time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"@annually", time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		got, ok := scheduler.Next(sqlease.Schedule{Cron: tc.cron}, from)
		if !ok || !got.Equal(tc.want) {
			t.Errorf("Next(%s) = %s, %t; want %s", tc.cron, got, ok, tc.want)
		}
	}
}

func TestNextKeepsLocation(t *testing.T) {
	from := time.Date(2026, 4, 15, 10, 20, 0, 0, time.UTC)
	got, _ := scheduler.Next(sqlease.Schedule{Cron: "0 9 * * *", Timezone: "Asia/Tokyo"}, from)
	if got.Location() != time.UTC {
		t.Errorf("Next returned location %s, want UTC like its input", got.Location())
	}
	if want := time.Date(2026, 4, 16, 0, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("Next = %s, want %s", got, want)
	}
}

// TestNextCronMatchesBruteForce compares Next with a minute-by-minute walk
// around every offset change of 2026 in zones with whole-hour, half-hour and
// midnight changes, using an independent cron matcher.
func TestNextCronMatchesBruteForce(t *testing.T) {
	specs := []string{
		"30 2 * * *", "30 1 * * *", "0 0 * * *", "15 0,1,2,3 * * *", "* 2 * * *",
		"0 9 * * 1-5", "59 23 * * *", "*/7 * * * *", "0 * * * *", "45 */2 * * *",
	}
	zones := []string{"America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Pacific/Chatham", "America/Santiago", "America/Havana", "Asia/Tehran", "UTC"}
	for _, zone := range zones {
		loc := scheduleZone(t, zone)
		var changes []time.Time
		for u := time.Date(2026, 1, 1, 0, 0, 0, 0, loc); ; {
			_, end := u.ZoneBounds()
			if end.IsZero() || end.Year() > 2026 {
				break
			}
			changes = append(changes, end)
			u = end
		}
		if zone != "UTC" && zone != "Asia/Tehran" && len(changes) != 2 {
			t.Fatalf("%s: %d offset changes in 2026, want 2", zone, len(changes))
		}
		if len(changes) == 0 { // no DST: check an arbitrary window
			changes = append(changes, time.Date(2026, 6, 1, 0, 0, 0, 0, loc))
		}
		for _, spec := range specs {
			ref := scheduleRefCron(t, spec)
			for _, change := range changes {
				from := change.Add(-50 * time.Hour).Truncate(time.Minute)
				to := change.Add(50 * time.Hour)
				var want []time.Time
				for m := from.Add(time.Minute); m.Before(to); m = m.Add(time.Minute) {
					if ref.occurs(m, loc) {
						want = append(want, m)
					}
				}
				var got []time.Time
				s := sqlease.Schedule{Cron: spec, Timezone: zone}
				for cur := from; ; {
					next, ok := scheduler.Next(s, cur)
					if !ok || !next.Before(to) {
						break
					}
					got = append(got, next)
					cur = next
				}
				for i := range max(len(got), len(want)) {
					var g, w time.Time
					if i < len(got) {
						g = got[i].In(loc)
					}
					if i < len(want) {
						w = want[i].In(loc)
					}
					if !g.Equal(w) {
						t.Errorf("%s %q around %s: occurrence %d = %s, want %s (%d occurrences, want %d)", zone, spec, change, i, g, w, len(got), len(want))
						break
					}
				}
			}
		}
	}
}

// scheduleRefCronSpec is a naive five-field cron matcher for numbers, lists,
// ranges, "*" and "*/n".
type scheduleRefCronSpec struct {
	fields    [5]map[int]bool
	allHours  bool
	domDowAnd bool
}

func scheduleRefCron(t *testing.T, spec string) scheduleRefCronSpec {
	t.Helper()
	parts := strings.Fields(spec)
	bounds := [5][2]int{{0, 59}, {0, 23}, {1, 31}, {1, 12}, {0, 6}}
	var r scheduleRefCronSpec
	for i, p := range parts {
		r.fields[i] = map[int]bool{}
		for _, item := range strings.Split(p, ",") {
			lo, hi, step := bounds[i][0], bounds[i][1], 1
			rng, st, hasStep := strings.Cut(item, "/")
			if hasStep {
				step, _ = strconv.Atoi(st)
			}
			if rng != "*" {
				a, b, isRange := strings.Cut(rng, "-")
				lo, _ = strconv.Atoi(a)
				hi = lo
				if isRange {
					hi, _ = strconv.Atoi(b)
				}
			}
			for v := lo; v <= hi; v += step {
				r.fields[i][v] = true
			}
		}
	}
	r.allHours = len(r.fields[1]) == 24
	r.domDowAnd = parts[2] == "*" || parts[4] == "*"
	return r
}

func (r scheduleRefCronSpec) matchWall(w time.Time) bool {
	if !r.fields[0][w.Minute()] || !r.fields[1][w.Hour()] || !r.fields[3][int(w.Month())] {
		return false
	}
	dom, dow := r.fields[2][w.Day()], r.fields[4][int(w.Weekday())]
	if r.domDowAnd {
		return dom && dow
	}
	return dom || dow
}

// occurs reports whether the minute instant m is an occurrence: its wall
// time matches (for wall-clock specs: and is not a second pass of a repeated
// time), or (wall-clock specs) the wall clock jumped to m over skipped
// minutes of which one matches.
func (r scheduleRefCronSpec) occurs(m time.Time, loc *time.Location) bool {
	wallOf := func(x time.Time) time.Time {
		x = x.In(loc)
		return time.Date(x.Year(), x.Month(), x.Day(), x.Hour(), x.Minute(), 0, 0, time.UTC)
	}
	w := wallOf(m)
	if r.allHours {
		return r.matchWall(w)
	}
	if r.matchWall(w) {
		for _, back := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
			if wallOf(m.Add(-back)).Equal(w) {
				return false // a repeated wall time, second pass
			}
		}
		return true
	}
	for s := wallOf(m.Add(-time.Minute)).Add(time.Minute); s.Before(w); s = s.Add(time.Minute) {
		if r.matchWall(s) {
			return true // skipped wall time: runs at the change
		}
	}
	return false
}

// Daily at 02:30 New York time, across the spring-forward change: 02:30 does
// not exist on 2026-03-08, so that day's run happens at the change, 03:00 EDT.
func ExampleNext() {
	s := sqlease.Schedule{Cron: "30 2 * * *", Timezone: "America/New_York"}
	t := time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)
	for range 3 {
		t, _ = scheduler.Next(s, t)
		fmt.Println(t.Format(time.RFC3339))
	}
	// Output:
	// 2026-03-08T07:00:00Z
	// 2026-03-09T06:30:00Z
	// 2026-03-10T06:30:00Z
}
