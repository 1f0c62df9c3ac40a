package scheduler

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/sqlease/sqlease"
)

// Bounds on Schedule.Every, enforced by ValidateSchedule.
//
// MinEvery keeps a job from turning the scheduler into a busy loop: every
// occurrence is a database round trip and a run-ledger row, so 100ms is
// already 864,000 rows a day. MaxEvery is a year and a day; anything longer
// is a calendar matter for cron (or a one-off "at").
const (
	MinEvery = 100 * time.Millisecond
	MaxEvery = 366 * 24 * time.Hour
)

// Cron expressions are the standard five fields (minute, hour, day of month,
// month, day of week) or a descriptor (@yearly, @annually, @monthly, @weekly,
// @daily, @midnight, @hourly). There is no seconds field, no "@every" (use
// Schedule.Every) and no "TZ=" prefix (use Schedule.Timezone).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// cronAllHours is the Hour bit set of a spec that matches every hour.
const cronAllHours = 1<<24 - 1

// ValidateSchedule checks s. It returns an error wrapping
// sqlease.ErrInvalidConfig and naming the field (schedule.every,
// schedule.cron, schedule.timezone or schedule.at) when:
//   - more than one of Every, Cron and At is set (all unset means once, now);
//   - Every is outside [MinEvery, MaxEvery];
//   - Cron is not a five-field expression or descriptor (see cronParser's
//     rules: no seconds field, no "@every", no "TZ=" prefix), or never matches;
//   - Timezone is given without Cron, is "Local", or is not a loadable IANA
//     zone.
//
// A zero At is "not set", so an At schedule is always a real instant; it may
// lie in the past (see First).
func ValidateSchedule(s sqlease.Schedule) error {
	var set []string
	if s.Every != 0 {
		set = append(set, "every")
	}
	if s.Cron != "" {
		set = append(set, "cron")
	}
	if !s.At.IsZero() {
		set = append(set, "at")
	}
	if len(set) > 1 {
		return invalidSchedule("schedule."+set[1], "must not be combined with schedule.%s: set only one of every, cron and at", set[0])
	}
	if s.Timezone != "" && s.Cron == "" {
		return invalidSchedule("schedule.timezone", "is only allowed with schedule.cron")
	}
	switch {
	case s.Every != 0:
		if s.Every < MinEvery || s.Every > MaxEvery {
			return invalidSchedule("schedule.every", "must be between %s and %s, got %s", MinEvery, MaxEvery, s.Every)
		}
	case s.Cron != "":
		if _, err := compileCron(s.Cron, s.Timezone); err != nil {
			return err
		}
	}
	return nil
}

func invalidSchedule(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s %s", sqlease.ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// First returns the first occurrence of a newly created job, given the
// database's now:
//   - every: now — the first run is immediate, and later ones follow at
//     now+Every, now+2×Every, … (each measured from the previous
//     occurrence's scheduled time, see Next);
//   - cron: the first match strictly after now, in the schedule's zone;
//   - at: At, even when it is in the past (the job is then due at once);
//   - once (nothing set): now.
//
// The result is in now's location, except for at, which is returned as
// given. s should be valid (ValidateSchedule); for an unparsable cron
// expression First returns the zero time, meaning no occurrence.
func First(s sqlease.Schedule, now time.Time) time.Time {
	switch {
	case s.Every != 0:
		return now
	case s.Cron != "":
		c, err := compileCron(s.Cron, s.Timezone)
		if err != nil {
			return time.Time{}
		}
		t, _ := c.next(now)
		return t
	case !s.At.IsZero():
		return s.At
	default:
		return now
	}
}

// Next returns the occurrence after scheduledFor and true, or false when the
// schedule has no more:
//   - every: exactly scheduledFor+Every, so that a late start never shifts
//     later occurrences and nothing drifts over any number of intervals;
//   - cron: the next match strictly after scheduledFor, in the schedule's zone
//     (see below for daylight-saving changes);
//   - at and once: false, a one-off has a single occurrence.
//
// Cron and daylight saving. Expressions pinned to particular hours follow the
// wall clock, like Vixie cron: a wall-clock time skipped by a spring-forward
// change runs once at the instant of the change (in America/New_York, "30 2 * * *"
// runs at 03:00 EDT on 2026-03-08), and a wall-clock time repeated by a
// fall-back change runs once, on its first pass ("30 1 * * *" runs at 01:30 EDT
// on 2026-11-01, not again at 01:30 EST). Expressions that match every hour
// ("*/15 * * * *", "@hourly") follow real time instead: nothing is added for a
// skipped hour, and both passes of a repeated hour run.
//
// The result is in scheduledFor's location. An invalid schedule has no next
// occurrence.
func Next(s sqlease.Schedule, scheduledFor time.Time) (time.Time, bool) {
	switch {
	case s.Every > 0:
		return scheduledFor.Add(s.Every), true
	case s.Every < 0:
		return time.Time{}, false
	case s.Cron != "":
		c, err := compileCron(s.Cron, s.Timezone)
		if err != nil {
			return time.Time{}, false
		}
		return c.next(scheduledFor)
	default:
		return time.Time{}, false
	}
}

// cronSchedule is a parsed cron expression bound to its zone.
//
// robfig/cron's own zone handling is not trusted: around offset changes it
// skips a day's run (a skipped 02:30), runs a repeated wall time twice, and
// with offset changes that are not whole hours (Lord Howe's 30 minutes)
// returns times that do not match or misses days. So spec is evaluated in
// UTC, where it is exact, as a function of wall-clock readings, and the
// mapping from readings to instants in loc is done here.
type cronSchedule struct {
	spec *cron.SpecSchedule // Location UTC: matches wall-clock readings
	loc  *time.Location
	// followsWall is set for expressions pinned to particular hours: they
	// follow the wall clock (a skipped time runs at the change, a repeated
	// time once). Expressions matching every hour follow real time.
	followsWall bool
}

// compileCron parses expr for zone tz ("" is UTC). Errors wrap
// sqlease.ErrInvalidConfig and name schedule.cron or schedule.timezone.
func compileCron(expr, tz string) (cronSchedule, error) {
	loc, err := loadScheduleZone(tz)
	if err != nil {
		return cronSchedule{}, err
	}
	trimmed := strings.TrimSpace(expr)
	switch {
	case strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ="):
		return cronSchedule{}, invalidSchedule("schedule.cron", "must not carry a time zone prefix (use schedule.timezone), got %q", expr)
	case strings.HasPrefix(trimmed, "@every"):
		return cronSchedule{}, invalidSchedule("schedule.cron", "must not be \"@every\" (use schedule.every), got %q", expr)
	}
	parsed, err := cronParser.Parse(trimmed)
	if err != nil {
		return cronSchedule{}, invalidSchedule("schedule.cron", "must be a five-field cron expression or a descriptor such as @daily, got %q: %v", expr, err)
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok { // cannot happen with the checks above
		return cronSchedule{}, invalidSchedule("schedule.cron", "is not supported, got %q", expr)
	}
	spec.Location = time.UTC
	// Every satisfiable day-and-month combination (even February 29) occurs
	// within robfig/cron's five-year search window from 2000-01-01.
	if spec.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return cronSchedule{}, invalidSchedule("schedule.cron", "must match some date, got %q", expr)
	}
	return cronSchedule{spec: spec, loc: loc, followsWall: spec.Hour&cronAllHours != cronAllHours}, nil
}

var scheduleZones sync.Map // zone name → *time.Location

// loadScheduleZone loads an IANA zone, caching successes (time.LoadLocation
// reads the zone database on every call).
func loadScheduleZone(tz string) (*time.Location, error) {
	if tz == "" || tz == "UTC" {
		return time.UTC, nil
	}
	if loc, ok := scheduleZones.Load(tz); ok {
		return loc.(*time.Location), nil
	}
	if tz == "Local" {
		return nil, invalidSchedule("schedule.timezone", "must name an IANA zone, not \"Local\" (it depends on the host)")
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, invalidSchedule("schedule.timezone", "must be a known IANA time zone, got %q: %v", tz, err)
	}
	scheduleZones.Store(tz, loc)
	return loc, nil
}

// cronMaxShift bounds the size of an offset change (real ones are at most two
// hours; the date-line jumps of whole days are older than any schedule).
const cronMaxShift = 3 * time.Hour

// wall returns x's wall-clock reading in c.loc, as a UTC time.
func (c cronSchedule) wall(x time.Time) time.Time {
	_, off := x.In(c.loc).Zone()
	return x.UTC().Add(time.Duration(off) * time.Second)
}

// next returns the first occurrence strictly after t, in t's location.
func (c cronSchedule) next(t time.Time) (time.Time, bool) {
	// Fast path: the first matching reading after t's, read with t's offset,
	// is the answer if it falls in the same offset period as t (and, for a
	// wall-clock expression, is not the second pass of a repeated time):
	// any other candidate would lie in a later period.
	local := t.In(c.loc)
	_, off := local.Zone()
	_, end := local.ZoneBounds()
	w := c.spec.Next(c.wall(t))
	if w.IsZero() {
		return time.Time{}, false
	}
	if x := w.Add(-time.Duration(off) * time.Second); end.IsZero() || x.Before(end) {
		if _, repeated := repeatedWallTime(x.In(c.loc)); !c.followsWall || !repeated {
			return x.In(t.Location()), true
		}
	}
	// Near an offset change: scan the matching readings from cronMaxShift
	// before t's and take the earliest instant after t.
	var best time.Time
	w = c.wall(t).Add(-cronMaxShift)
	for range 10_000 {
		w = c.spec.Next(w)
		if w.IsZero() || (!best.IsZero() && w.Sub(c.wall(best)) > cronMaxShift) {
			break
		}
		for _, x := range c.instants(w) {
			if x.After(t) && (best.IsZero() || x.Before(best)) {
				best = x
			}
		}
	}
	if best.IsZero() {
		return time.Time{}, false
	}
	return best.In(t.Location()), true
}

// instants returns the occurrences for the wall-clock reading w (a UTC time):
// the instant whose reading it is; for a repeated reading both instants, or
// only the first for a wall-clock expression; for a skipped reading none, or
// for a wall-clock expression the instant of the change.
func (c cronSchedule) instants(w time.Time) []time.Time {
	// An instant reading w lies within 14 hours of w, so the offsets in
	// force 15 hours either side are the candidates.
	_, offBefore := w.Add(-15 * time.Hour).In(c.loc).Zone()
	_, offAfter := w.Add(15 * time.Hour).In(c.loc).Zone()
	var out []time.Time
	for _, off := range []int{offBefore, offAfter} {
		x := w.Add(-time.Duration(off) * time.Second)
		if _, o := x.In(c.loc).Zone(); o == off && (len(out) == 0 || !out[0].Equal(x)) {
			out = append(out, x)
		}
	}
	switch {
	case len(out) == 0 && c.followsWall:
		start, _ := w.Add(-time.Duration(offBefore) * time.Second).In(c.loc).ZoneBounds()
		return []time.Time{start}
	case len(out) == 2 && c.followsWall:
		return out[:1]
	}
	return out
}

// repeatedWallTime reports whether t (in its zone) is the second pass of a
// wall-clock time repeated by a backward offset change, and if so the end of
// the repeated window.
func repeatedWallTime(t time.Time) (time.Time, bool) {
	start, _ := t.ZoneBounds()
	if start.IsZero() {
		return time.Time{}, false
	}
	_, offNow := start.Zone()
	_, offBefore := start.Add(-time.Nanosecond).Zone()
	back := time.Duration(offBefore-offNow) * time.Second
	if back <= 0 || t.Sub(start) >= back {
		return time.Time{}, false
	}
	return start.Add(back), true
}
