package scheduler_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
)

type planCase struct {
	name    string
	s       sqlease.Schedule
	policy  sqlease.MissedRuns
	older   time.Duration
	due     time.Time
	now     time.Time
	run     time.Time // zero: nothing runs
	next    time.Time // zero: no next occurrence
	hasNext bool
}

func (tc planCase) check(t *testing.T) {
	t.Helper()
	run, ok, next, hasNext := scheduler.Plan(tc.s, tc.policy, tc.older, tc.due, tc.now)
	if ok != !tc.run.IsZero() || (ok && !run.Equal(tc.run)) {
		if ok {
			t.Errorf("run = %s, want %s", run, planShow(tc.run))
		} else {
			t.Errorf("runs nothing, want %s", planShow(tc.run))
		}
	}
	if hasNext != tc.hasNext || (hasNext && !next.Equal(tc.next)) {
		t.Errorf("next = %s (%t), want %s (%t)", next, hasNext, tc.next, tc.hasNext)
	}
}

func planShow(t time.Time) string {
	if t.IsZero() {
		return "nothing"
	}
	return t.String()
}

func TestPlanEvery(t *testing.T) {
	now := time.Date(2026, 4, 15, 10, 0, 0, 0, time.UTC)
	minute := sqlease.Schedule{Every: time.Minute}
	hourly := sqlease.Schedule{Every: time.Hour}
	for _, tc := range []planCase{
		// run_once, the default.
		{name: "due now", s: minute, due: now, now: now, run: now, next: now.Add(time.Minute), hasNext: true},
		{name: "a little late", s: minute, policy: sqlease.RunOnce, due: now.Add(-30 * time.Second), now: now, run: now.Add(-30 * time.Second), next: now.Add(30 * time.Second), hasNext: true},
		{name: "one missed, boundary", s: minute, due: now.Add(-time.Minute), now: now, run: now, next: now.Add(time.Minute), hasNext: true},
		{name: "an hour missed collapses", s: minute, policy: sqlease.RunOnce, due: now.Add(-time.Hour - 30*time.Second), now: now, run: now.Add(-30 * time.Second), next: now.Add(30 * time.Second), hasNext: true},
		{name: "run_once too old", s: hourly, policy: sqlease.RunOnce, older: 10 * time.Minute, due: now.Add(-3*time.Hour - 20*time.Minute), now: now, next: now.Add(40 * time.Minute), hasNext: true},
		{name: "run_once exactly at the cutoff", s: hourly, older: 20 * time.Minute, due: now.Add(-3*time.Hour - 20*time.Minute), now: now, run: now.Add(-20 * time.Minute), next: now.Add(40 * time.Minute), hasNext: true},
		{name: "run_once within the cutoff", s: hourly, older: 30 * time.Minute, due: now.Add(-20 * time.Minute), now: now, run: now.Add(-20 * time.Minute), next: now.Add(40 * time.Minute), hasNext: true},

		// run_all: oldest first.
		{name: "run_all runs the oldest", s: minute, policy: sqlease.RunAll, due: now.Add(-5 * time.Minute), now: now, run: now.Add(-5 * time.Minute), next: now.Add(-4 * time.Minute), hasNext: true},
		{name: "run_all due now", s: minute, policy: sqlease.RunAll, due: now, now: now, run: now, next: now.Add(time.Minute), hasNext: true},
		{name: "run_all drops the too old", s: minute, policy: sqlease.RunAll, older: 150 * time.Second, due: now.Add(-5 * time.Minute), now: now, run: now.Add(-2 * time.Minute), next: now.Add(-time.Minute), hasNext: true},
		{name: "run_all cutoff boundary kept", s: minute, policy: sqlease.RunAll, older: 2 * time.Minute, due: now.Add(-5 * time.Minute), now: now, run: now.Add(-2 * time.Minute), next: now.Add(-time.Minute), hasNext: true},
		{name: "run_all all too old", s: minute, policy: sqlease.RunAll, older: 10 * time.Second, due: now.Add(-5*time.Minute - 30*time.Second), now: now, next: now.Add(30 * time.Second), hasNext: true},
		{name: "run_all oldest not too old", s: minute, policy: sqlease.RunAll, older: time.Hour, due: now.Add(-5 * time.Minute), now: now, run: now.Add(-5 * time.Minute), next: now.Add(-4 * time.Minute), hasNext: true},

		// skip: only what is on time.
		{name: "skip on time", s: hourly, policy: sqlease.Skip, due: now.Add(-10 * time.Second), now: now, run: now.Add(-10 * time.Second), next: now.Add(time.Hour - 10*time.Second), hasNext: true},
		{name: "skip due now", s: hourly, policy: sqlease.Skip, due: now, now: now, run: now, next: now.Add(time.Hour), hasNext: true},
		{name: "skip tolerance boundary", s: hourly, policy: sqlease.Skip, due: now.Add(-scheduler.DefaultSkipTolerance), now: now, run: now.Add(-scheduler.DefaultSkipTolerance), next: now.Add(time.Hour - scheduler.DefaultSkipTolerance), hasNext: true},
		{name: "skip just past tolerance", s: hourly, policy: sqlease.Skip, due: now.Add(-scheduler.DefaultSkipTolerance - 1), now: now, next: now.Add(time.Hour - scheduler.DefaultSkipTolerance - 1), hasNext: true},
		{name: "skip after an outage", s: hourly, policy: sqlease.Skip, due: now.Add(-3*time.Hour - 10*time.Minute), now: now, next: now.Add(50 * time.Minute), hasNext: true},
		{name: "skip runs the latest if on time", s: hourly, policy: sqlease.Skip, due: now.Add(-3*time.Hour - 10*time.Second), now: now, run: now.Add(-10 * time.Second), next: now.Add(time.Hour - 10*time.Second), hasNext: true},
		{name: "skip with a wider tolerance", s: hourly, policy: sqlease.Skip, older: 15 * time.Minute, due: now.Add(-10 * time.Minute), now: now, run: now.Add(-10 * time.Minute), next: now.Add(50 * time.Minute), hasNext: true},
		{name: "skip with a narrower tolerance", s: hourly, policy: sqlease.Skip, older: time.Second, due: now.Add(-10 * time.Second), now: now, next: now.Add(time.Hour - 10*time.Second), hasNext: true},

		// Not yet due, nothing left.
		{name: "not due yet", s: minute, due: now.Add(time.Second), now: now, next: now.Add(time.Second), hasNext: true},
		{name: "no occurrence left", s: minute, now: now},
	} {
		t.Run(tc.name, tc.check)
	}
}

func TestPlanHugeGapEvery(t *testing.T) {
	now := time.Date(2026, 4, 15, 10, 0, 0, 987654321, time.UTC)
	for _, every := range []time.Duration{scheduler.MinEvery, time.Second, 7*time.Second + 3, time.Hour} {
		for _, years := range []int{10, 300} { // 300 years is beyond a time.Duration
			due := now.AddDate(-years, 0, 0).Add(-every / 3)
			gap := strconv.Itoa(years) + "y"
			run, ok, next, hasNext := scheduler.Plan(sqlease.Schedule{Every: every}, sqlease.RunOnce, 0, due, now)
			if !ok || !hasNext {
				t.Fatalf("every %s, gap %s: ok=%t hasNext=%t", every, gap, ok, hasNext)
			}
			if run.After(now) || !next.After(now) || !next.Equal(run.Add(every)) {
				t.Errorf("every %s, gap %s: run %s, next %s around now %s", every, gap, run, next, now)
			}
			if d := run.Sub(due); d < 1<<62 && d%every != 0 {
				t.Errorf("every %s, gap %s: run %s is not on the grid from %s", every, gap, run, due)
			}
		}
	}
}

func TestPlanCron(t *testing.T) {
	at := func(day, h, m int) time.Time { return time.Date(2026, 4, day, h, m, 0, 0, time.UTC) }
	hourly := sqlease.Schedule{Cron: "0 * * * *"}
	weekdays := sqlease.Schedule{Cron: "0 9 * * 1-5"}
	ny, _ := time.LoadLocation("America/New_York")
	nyDaily := sqlease.Schedule{Cron: "30 2 * * *", Timezone: "America/New_York"}
	nyd := func(day, h, m int) time.Time { return time.Date(2026, 3, day, h, m, 0, 0, ny).UTC() }
	for _, tc := range []planCase{
		{name: "run_once collapses", s: hourly, due: at(15, 6, 0), now: at(15, 9, 30), run: at(15, 9, 0), next: at(15, 10, 0), hasNext: true},
		{name: "run_all oldest", s: hourly, policy: sqlease.RunAll, due: at(15, 6, 0), now: at(15, 9, 30), run: at(15, 6, 0), next: at(15, 7, 0), hasNext: true},
		{name: "run_all too old", s: hourly, policy: sqlease.RunAll, older: 2 * time.Hour, due: at(15, 6, 0), now: at(15, 9, 30), run: at(15, 8, 0), next: at(15, 9, 0), hasNext: true},
		{name: "run_all all too old", s: hourly, policy: sqlease.RunAll, older: 20 * time.Minute, due: at(15, 6, 0), now: at(15, 9, 30), next: at(15, 10, 0), hasNext: true},
		{name: "skip late", s: hourly, policy: sqlease.Skip, due: at(15, 6, 0), now: at(15, 9, 30), next: at(15, 10, 0), hasNext: true},
		{name: "skip on time after an outage", s: hourly, policy: sqlease.Skip, due: at(15, 6, 0), now: at(15, 9, 0).Add(30 * time.Second), run: at(15, 9, 0), next: at(15, 10, 0), hasNext: true},
		{name: "due exactly now", s: hourly, due: at(15, 9, 0), now: at(15, 9, 0), run: at(15, 9, 0), next: at(15, 10, 0), hasNext: true},
		{name: "unaligned due", s: hourly, due: at(15, 6, 17), now: at(15, 9, 30), run: at(15, 9, 0), next: at(15, 10, 0), hasNext: true},
		{name: "unaligned due, nothing missed", s: hourly, due: at(15, 6, 17), now: at(15, 6, 30), run: at(15, 6, 17), next: at(15, 7, 0), hasNext: true},
		{name: "weekend gap", s: weekdays, due: at(10, 9, 0), now: at(19, 12, 0), run: at(17, 9, 0), next: at(20, 9, 0), hasNext: true},
		{name: "years gap", s: weekdays, due: time.Date(2023, 1, 2, 9, 0, 0, 0, time.UTC), now: at(19, 12, 0), run: at(17, 9, 0), next: at(20, 9, 0), hasNext: true},
		{name: "leap day", s: sqlease.Schedule{Cron: "0 0 29 2 *"}, due: time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC), now: at(19, 12, 0), run: time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC), next: time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC), hasNext: true},
		{name: "DST run_once", s: nyDaily, due: nyd(7, 2, 30), now: nyd(8, 12, 0), run: nyd(8, 3, 0), next: nyd(9, 2, 30), hasNext: true},
		{name: "DST run_all", s: nyDaily, policy: sqlease.RunAll, due: nyd(7, 2, 30), now: nyd(8, 12, 0), run: nyd(7, 2, 30), next: nyd(8, 3, 0), hasNext: true},
	} {
		t.Run(tc.name, tc.check)
	}
}

func TestPlanHugeGapCron(t *testing.T) {
	now := time.Date(2026, 4, 15, 10, 20, 30, 500, time.UTC)
	due := time.Date(2016, 4, 15, 10, 20, 0, 0, time.UTC)
	for _, tc := range []struct {
		cron       string
		run, after time.Time
	}{
		{"* * * * *", time.Date(2026, 4, 15, 10, 20, 0, 0, time.UTC), time.Date(2026, 4, 15, 10, 21, 0, 0, time.UTC)},
		{"*/5 * * * *", time.Date(2026, 4, 15, 10, 20, 0, 0, time.UTC), time.Date(2026, 4, 15, 10, 25, 0, 0, time.UTC)},
		{"* 3 * * *", time.Date(2026, 4, 15, 3, 59, 0, 0, time.UTC), time.Date(2026, 4, 16, 3, 0, 0, 0, time.UTC)},
		{"* * 1 1 *", time.Date(2026, 1, 1, 23, 59, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"@yearly", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		s := sqlease.Schedule{Cron: tc.cron}
		for _, policy := range []sqlease.MissedRuns{sqlease.RunOnce, sqlease.RunAll, sqlease.Skip} {
			start := time.Now()
			run, ok, next, hasNext := scheduler.Plan(s, policy, 0, due, now)
			took := time.Since(start)
			wantRun, wantNext := tc.run, tc.after
			switch policy {
			case sqlease.RunAll:
				wantRun = due
				wantNext, _ = scheduler.Next(s, due)
			case sqlease.Skip:
				if now.Sub(tc.run) > scheduler.DefaultSkipTolerance {
					wantRun = time.Time{}
				}
			}
			if ok != !wantRun.IsZero() || (ok && !run.Equal(wantRun)) || !hasNext || !next.Equal(wantNext) {
				t.Errorf("%q %s: run %s (%t), next %s (%t); want run %s, next %s", tc.cron, policy, run, ok, next, hasNext, planShow(wantRun), wantNext)
			}
			if took > time.Second {
				t.Errorf("%q %s: Plan over ten years took %s", tc.cron, policy, took)
			}
		}
	}
}

func TestPlanOneOff(t *testing.T) {
	now := time.Date(2026, 4, 15, 10, 0, 0, 0, time.UTC)
	once := sqlease.Schedule{}
	at := sqlease.Schedule{At: now.Add(-time.Hour)}
	for _, policy := range []sqlease.MissedRuns{"", sqlease.RunOnce, sqlease.RunAll, sqlease.Skip} {
		for _, tc := range []planCase{
			{name: "once due now", s: once, due: now, now: now, run: now},
			{name: "once an hour late", s: once, due: now.Add(-time.Hour), now: now, run: now.Add(-time.Hour)},
			{name: "at an hour late", s: at, due: at.At, now: now, run: at.At},
			{name: "at days late", s: at, due: now.AddDate(0, 0, -3), now: now, run: now.AddDate(0, 0, -3)},
			{name: "at too old", s: at, older: 30 * time.Minute, due: at.At, now: now},
			{name: "at exactly at the cutoff", s: at, older: time.Hour, due: at.At, now: now, run: at.At},
			{name: "at not yet due", s: sqlease.Schedule{At: now.Add(time.Hour)}, due: now.Add(time.Hour), now: now, next: now.Add(time.Hour), hasNext: true},
		} {
			tc.policy = policy
			t.Run(string(policy)+"/"+tc.name, tc.check)
		}
	}
}

// TestPlanMatchesWalk compares Plan with a naive walk over the occurrences
// for random small gaps.
func TestPlanMatchesWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	schedules := []sqlease.Schedule{
		{Every: time.Second}, {Every: 7 * time.Second}, {Every: time.Minute}, {Every: 90 * time.Minute},
		{Cron: "*/5 * * * *"}, {Cron: "0 9 * * 1-5", Timezone: "Europe/Berlin"}, {Cron: "30 1,2 * * *", Timezone: "America/New_York"},
		{Cron: "@hourly", Timezone: "Australia/Lord_Howe"},
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 2000 {
		s := schedules[i%len(schedules)]
		due := scheduler.First(s, base.Add(time.Duration(rng.Int64N(int64(365*24*time.Hour)))))
		span := 3 * 24 * time.Hour
		if s.Every != 0 {
			span = 200 * s.Every
		}
		now := due.Add(time.Duration(rng.Int64N(int64(span))))
		if i%7 == 0 {
			now = due
		}
		older := []time.Duration{0, 0, time.Minute, time.Hour, 6 * time.Hour}[rng.IntN(5)]
		var occ []time.Time // occurrences ≤ now, oldest first
		for o := due; !o.After(now); o, _ = scheduler.Next(s, o) {
			occ = append(occ, o)
		}
		latest := occ[len(occ)-1]
		after, _ := scheduler.Next(s, latest)
		keep := func(o time.Time) bool { return older == 0 || !o.Before(now.Add(-older)) }
		for _, policy := range []sqlease.MissedRuns{sqlease.RunOnce, sqlease.RunAll, sqlease.Skip} {
			var want time.Time
			switch policy {
			case sqlease.RunOnce:
				if keep(latest) {
					want = latest
				}
			case sqlease.RunAll:
				for _, o := range occ {
					if keep(o) {
						want = o
						break
					}
				}
			case sqlease.Skip:
				tol := older
				if tol == 0 {
					tol = scheduler.DefaultSkipTolerance
				}
				if now.Sub(latest) <= tol {
					want = latest
				}
			}
			wantNext := after
			if !want.IsZero() {
				wantNext, _ = scheduler.Next(s, want)
			}
			run, ok, next, hasNext := scheduler.Plan(s, policy, older, due, now)
			if ok != !want.IsZero() || (ok && !run.Equal(want)) || !hasNext || !next.Equal(wantNext) {
				t.Fatalf("%+v %s older=%s due=%s now=%s: run %s (%t) next %s; want run %s next %s",
					s, policy, older, due, now, run, ok, next, planShow(want), wantNext)
			}
		}
	}
}

func TestValidateMissedRuns(t *testing.T) {
	for _, p := range []sqlease.MissedRuns{"", sqlease.RunOnce, sqlease.RunAll, sqlease.Skip} {
		if err := scheduler.ValidateMissedRuns(p, time.Hour); err != nil {
			t.Errorf("ValidateMissedRuns(%q) = %v", p, err)
		}
	}
	for _, tc := range []struct {
		policy sqlease.MissedRuns
		older  time.Duration
		field  string
	}{
		{"run_twice", 0, "missed_runs"},
		{"RUN_ONCE", 0, "missed_runs"},
		{sqlease.RunOnce, -time.Second, "skip_if_older_than"},
	} {
		err := scheduler.ValidateMissedRuns(tc.policy, tc.older)
		if !errors.Is(err, sqlease.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field+" ") {
			t.Errorf("ValidateMissedRuns(%q, %s) = %v, want an invalid-config error naming %s", tc.policy, tc.older, err, tc.field)
		}
	}
}

// An hourly job whose scheduler was down from 06:00 to 09:30.
func ExamplePlan() {
	s := sqlease.Schedule{Every: time.Hour}
	due := time.Date(2026, 4, 15, 6, 0, 0, 0, time.UTC)
	now := time.Date(2026, 4, 15, 9, 30, 0, 0, time.UTC)
	for _, policy := range []sqlease.MissedRuns{sqlease.RunOnce, sqlease.RunAll, sqlease.Skip} {
		run, ok, next, _ := scheduler.Plan(s, policy, 0, due, now)
		if ok {
			fmt.Printf("%s: run %s, then %s\n", policy, run.Format("15:04"), next.Format("15:04"))
		} else {
			fmt.Printf("%s: run nothing, next %s\n", policy, next.Format("15:04"))
		}
	}
	// Output:
	// run_once: run 09:00, then 10:00
	// run_all: run 06:00, then 07:00
	// skip: run nothing, next 10:00
}
