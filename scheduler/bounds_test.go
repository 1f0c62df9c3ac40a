package scheduler_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
)

// Every string field of a job is bounded, with an error naming the field
// and not echoing the value (issue 30, item 6: a batch took a 3.9 MiB cron
// string, which then rode along on every listing page).
func TestPrepareBoundsEveryField(t *testing.T) {
	huge := strings.Repeat(" ", 4<<20)
	base := sqlease.Job{Name: "j", Schedule: sqlease.Schedule{Every: 60e9}}
	for _, tc := range []struct {
		field string
		edit  func(j *sqlease.Job)
	}{
		{"name", func(j *sqlease.Job) { j.Name = "a" + strings.Repeat("b", 4<<20) }},
		{"key", func(j *sqlease.Job) { j.Key = huge }},
		{"schedule.cron", func(j *sqlease.Job) { j.Schedule = sqlease.Schedule{Cron: huge + "0 0 * * *"} }},
		{"schedule.timezone", func(j *sqlease.Job) {
			j.Schedule = sqlease.Schedule{Cron: "0 0 * * *", Timezone: "Europe/Paris" + huge}
		}},
		{"missed_runs", func(j *sqlease.Job) { j.MissedRuns = sqlease.MissedRuns(huge) }},
		{"action", func(j *sqlease.Job) { j.Action = json.RawMessage(`{"x":"` + strings.Repeat("a", 64<<10) + `"}`) }},
	} {
		j := base
		tc.edit(&j)
		_, _, err := scheduler.Prepare(j, nil)
		if err == nil {
			t.Errorf("%s of %d bytes: accepted", tc.field, 4<<20)
			continue
		}
		if !errors.Is(err, sqlease.ErrInvalidConfig) && !errors.Is(err, sqlease.ErrInvalidName) {
			t.Errorf("%s: %v is not an invalid-config error", tc.field, err)
		}
		if msg := err.Error(); !strings.Contains(msg, ": "+tc.field+" must ") || len(msg) > 300 {
			t.Errorf("%s: error does not name the field first, or echoes the value: %.300s", tc.field, msg)
		}
	}
	// The longest spelled-out cron expression and IANA zone still pass.
	j := base
	j.Schedule = sqlease.Schedule{Cron: "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59 " +
		"0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31 " +
		"JAN,FEB,MAR,APR,MAY,JUN,JUL,AUG,SEP,OCT,NOV,DEC SUN,MON,TUE,WED,THU,FRI,SAT", Timezone: "America/Argentina/ComodRivadavia"}
	if _, _, err := scheduler.Prepare(j, nil); err != nil {
		t.Fatalf("longest legitimate cron: %v", err)
	}
}
