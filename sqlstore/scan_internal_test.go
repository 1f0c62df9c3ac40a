package sqlstore

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
)

// fakeJobRow is a job row as the scan sees it: only its schedule and
// action columns set, the others left as they are.
type fakeJobRow struct{ sched, action string }

// jobColumn is the place of column name in JobColumns.
func jobColumn(name string) int {
	for i, c := range strings.Split(JobColumns, ",") {
		if strings.TrimSpace(c) == name {
			return i
		}
	}
	panic("no column " + name)
}

var schedCol, actionCol = jobColumn("schedule"), jobColumn("action")

// Scan fills the destinations of the schedule and action columns.
func (r *fakeJobRow) Scan(dest ...any) error {
	*dest[schedCol].(*string) = r.sched
	*dest[actionCol].(*string) = r.action
	return nil
}

// TestJobScanDecodesEachRow: a scan reused for the rows of one query
// decodes each row's own schedule and action, whatever the rows before it
// held, and each job gets its own copy of its action.
func TestJobScanDecodesEachRow(t *testing.T) {
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	x := `{"at":"2026-11-28T12:00:00Z"}`
	y := `{"every":60000000000}`
	rows := []struct {
		row     fakeJobRow
		sched   sqlease.Schedule
		action  string
		corrupt bool
	}{
		{fakeJobRow{x, `{"url":"a"}`}, sqlease.Schedule{At: at}, `{"url":"a"}`, false},
		{fakeJobRow{x, `{"url":"a"}`}, sqlease.Schedule{At: at}, `{"url":"a"}`, false},
		{fakeJobRow{y, `{"url":"a"}`}, sqlease.Schedule{Every: time.Minute}, `{"url":"a"}`, false},
		{fakeJobRow{y, ``}, sqlease.Schedule{Every: time.Minute}, ``, false},
		{fakeJobRow{`{"every":`, `{"url":"a"}`}, sqlease.Schedule{}, ``, true},
		{fakeJobRow{x, `{"url":"b"}`}, sqlease.Schedule{At: at}, `{"url":"b"}`, false},
		{fakeJobRow{x, `{"url":`}, sqlease.Schedule{At: at}, ``, true},
		{fakeJobRow{x, `{"url":"b"}`}, sqlease.Schedule{At: at}, `{"url":"b"}`, false},
		{fakeJobRow{`{}`, `{"url":"b"}`}, sqlease.Schedule{}, `{"url":"b"}`, false},
	}
	js := newJobScan()
	var got []StoredJob
	for i, r := range rows {
		j, err := js.scan(&r.row)
		var bad *CorruptRow
		if r.corrupt != errors.As(err, &bad) {
			t.Fatalf("row %d: error %v, want corrupt %v", i, err, r.corrupt)
		}
		if r.corrupt {
			continue
		}
		if j.Schedule != r.sched {
			t.Errorf("row %d: schedule %+v, want %+v", i, j.Schedule, r.sched)
		}
		if string(j.Action) != r.action {
			t.Errorf("row %d: action %q, want %q", i, j.Action, r.action)
		}
		got = append(got, j)
	}
	got[0].Action[2] = 'X'
	if string(got[1].Action) != `{"url":"a"}` {
		t.Errorf("a change to one job's action changed another's: %q", got[1].Action)
	}
}

// TestJobScanRepeatedRowAllocations: the rows of a claim mostly share
// their schedule and action; such a row costs its action's copy, not a
// decode (which also moved the row's StoredJob to the heap).
func TestJobScanRepeatedRowAllocations(t *testing.T) {
	js := newJobScan()
	row := &fakeJobRow{`{"at":"2026-11-28T12:00:00Z"}`, `{"url":"http://127.0.0.1:8080/hook"}`}
	if _, err := js.scan(row); err != nil {
		t.Fatal(err)
	}
	var sink StoredJob
	allocs := testing.AllocsPerRun(200, func() {
		j, err := js.scan(row)
		if err != nil {
			t.Fatal(err)
		}
		sink = j
	})
	if allocs > 1 {
		t.Errorf("a row like the one before cost %.0f allocations, want at most 1 (its action's copy)", allocs)
	}
	if _, err := json.Marshal(sink.Schedule); err != nil {
		t.Fatal(err)
	}
}
