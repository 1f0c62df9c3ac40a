package schedproc

import (
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
)

// TestAnalyzeFindsDuplicates feeds the checker hand-made histories: it must
// accept a retry after a failed or abandoned attempt and flag every kind of
// duplicate or unexplained record.
func TestAnalyzeFindsDuplicates(t *testing.T) {
	sf := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)
	key := "j/" + FormatSF(sf)
	run := func(attempt int, holder string, epoch int64, outcome sqlease.Outcome) sqlease.Run {
		return sqlease.Run{Job: "j", ScheduledFor: sf, Attempt: attempt, Holder: holder, Epoch: epoch, Outcome: outcome}
	}
	exec := func(attempt int, holder string, epoch int64, doneErr string) []Event {
		e := Event{Ev: EvExec, Holder: holder, Job: "j", SF: FormatSF(sf), Attempt: attempt, Epoch: epoch, RunHolder: holder, Key: key}
		d := e
		d.Ev, d.Err = EvExecDone, doneErr
		return []Event{e, d}
	}
	row := func(attempt int, holder string, epoch int64) ExecRow {
		return ExecRow{Job: "j", SF: FormatSF(sf), Attempt: attempt, Holder: holder, Epoch: epoch}
	}
	cat := func(evs ...[]Event) []Event {
		var out []Event
		for _, e := range evs {
			out = append(out, e...)
		}
		return out
	}
	cases := []struct {
		name   string
		runs   []sqlease.Run
		rows   []ExecRow
		events []Event
		want   string // substring of a violation; "" for none
	}{
		{"once", []sqlease.Run{run(1, "a", 1, sqlease.OutcomeSucceeded)}, []ExecRow{row(1, "a", 1)}, exec(1, "a", 1, ""), ""},
		{"retry after abandoned",
			[]sqlease.Run{run(1, "a", 1, sqlease.OutcomeAbandoned), run(2, "b", 2, sqlease.OutcomeSucceeded)},
			[]ExecRow{row(1, "a", 1), row(2, "b", 2)}, cat(exec(1, "a", 1, ""), exec(2, "b", 2, "")), ""},
		{"retry after failed",
			[]sqlease.Run{run(1, "a", 1, sqlease.OutcomeFailed), run(2, "b", 2, sqlease.OutcomeSucceeded)},
			[]ExecRow{row(2, "b", 2)}, cat(exec(1, "a", 1, "boom"), exec(2, "b", 2, "")), ""},
		{"one attempt executed twice",
			[]sqlease.Run{run(1, "a", 1, sqlease.OutcomeSucceeded)},
			[]ExecRow{row(1, "a", 1), row(1, "a", 1)}, cat(exec(1, "a", 1, ""), exec(1, "a", 1, "")), "DUPLICATE"},
		{"re-executed after success",
			[]sqlease.Run{run(1, "a", 1, sqlease.OutcomeSucceeded), run(2, "b", 2, sqlease.OutcomeSucceeded)},
			[]ExecRow{row(1, "a", 1), row(2, "b", 2)}, cat(exec(1, "a", 1, ""), exec(2, "b", 2, "")), "DUPLICATE"},
		{"re-executed while running",
			[]sqlease.Run{run(1, "a", 1, sqlease.OutcomeRunning), run(2, "b", 2, sqlease.OutcomeSucceeded)},
			[]ExecRow{row(1, "a", 1), row(2, "b", 2)}, cat(exec(1, "a", 1, ""), exec(2, "b", 2, "")), "DUPLICATE"},
		{"row without event",
			[]sqlease.Run{run(1, "a", 1, sqlease.OutcomeSucceeded)},
			[]ExecRow{row(1, "a", 1), row(1, "c", 1)}, exec(1, "a", 1, ""), "without an exec event"},
		{"execution without run",
			nil, []ExecRow{row(1, "a", 1)}, exec(1, "a", 1, ""), "no run row"},
		{"execution under another epoch than its run",
			[]sqlease.Run{run(1, "a", 2, sqlease.OutcomeSucceeded)},
			[]ExecRow{row(1, "a", 1)}, exec(1, "a", 1, ""), "run row says"},
		{"success without a recorded execution",
			[]sqlease.Run{run(1, "a", 1, sqlease.OutcomeSucceeded)},
			nil, exec(1, "a", 1, "insert failed"), "want 1 and 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := Analyze(map[string]sqlease.Job{"j": {Name: "j"}}, c.runs, c.rows, c.events)
			got := strings.Join(a.Violations, "\n")
			switch {
			case c.want == "" && got != "":
				t.Errorf("unexpected violations:\n%s", got)
			case c.want != "" && !strings.Contains(got, c.want):
				t.Errorf("want a violation containing %q, got:\n%s", c.want, got)
			}
		})
	}
}
