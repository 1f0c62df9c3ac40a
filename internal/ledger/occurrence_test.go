package ledger_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/ledger"
)

// report is a hand-made executor's report.
type report string

func (r report) String() string { return string(r) }

var sf = time.Date(2026, 11, 22, 4, 46, 9, 0, time.UTC)

// run is attempt of the occurrence j@sf by holder under epoch.
func run(attempt int, holder string, epoch int64, outcome sqlease.Outcome) sqlease.Run {
	return sqlease.Run{Job: "j", ScheduledFor: sf, Attempt: attempt, Holder: holder, Epoch: epoch, Outcome: outcome}
}

// execs is attempt's start by holder under epoch and, with done, its end.
func execs(attempt int, holder string, epoch int64, done bool) []ledger.Exec[report] {
	o := ledger.Occurrence{Job: "j", SF: ledger.FormatSF(sf)}
	x := ledger.Exec[report]{Occurrence: o, Attempt: attempt, Holder: holder, Epoch: epoch,
		RunHolder: holder, Key: o.Job + "/" + o.SF, Report: report("exec " + holder)}
	if !done {
		return []ledger.Exec[report]{x}
	}
	end := x
	end.Done, end.Report = true, report("exec_done "+holder)
	return []ledger.Exec[report]{x, end}
}

func execRow(attempt int, holder string, epoch int64) ledger.ExecRow {
	return ledger.ExecRow{Job: "j", SF: ledger.FormatSF(sf), Attempt: attempt, Holder: holder, Epoch: epoch}
}

func join[T any](xs ...[]T) []T {
	var out []T
	for _, x := range xs {
		out = append(out, x...)
	}
	return out
}

// The occurrence checker passes an occurrence done once, and once more only
// after a recorded failure, and names each way of doing it twice or of its
// accounts disagreeing.
func TestCheckOccurrences(t *testing.T) {
	ok, failed := sqlease.OutcomeSucceeded, sqlease.OutcomeFailed
	for _, c := range []struct {
		name  string
		runs  []sqlease.Run
		rows  []ledger.ExecRow
		execs []ledger.Exec[report]
		want  string // a violation's text, "" for none
	}{
		{name: "once",
			runs: []sqlease.Run{run(1, "a", 1, ok)}, rows: []ledger.ExecRow{execRow(1, "a", 1)}, execs: execs(1, "a", 1, true)},
		{name: "retried after a failure",
			runs:  []sqlease.Run{run(1, "a", 1, failed), run(2, "b", 2, ok)},
			rows:  []ledger.ExecRow{execRow(2, "b", 2)},
			execs: join(execs(1, "a", 1, false), execs(2, "b", 2, true))},
		{name: "two successes",
			runs:  []sqlease.Run{run(1, "a", 1, ok), run(2, "b", 2, ok)},
			rows:  []ledger.ExecRow{execRow(1, "a", 1), execRow(2, "b", 2)},
			execs: join(execs(1, "a", 1, true), execs(2, "b", 2, true)),
			want:  "completed 2 times"},
		{name: "retried after a success",
			runs:  []sqlease.Run{run(1, "a", 1, ok), run(2, "b", 2, failed)},
			rows:  []ledger.ExecRow{execRow(1, "a", 1)},
			execs: join(execs(1, "a", 1, true), execs(2, "b", 2, false)),
			want:  "executed again as attempt 2 by b@2 although attempt 1 (by a@1) is succeeded"},
		{name: "one attempt executed twice",
			runs:  []sqlease.Run{run(1, "a", 1, ok)},
			rows:  []ledger.ExecRow{execRow(1, "a", 1)},
			execs: join(execs(1, "a", 1, true), execs(1, "b", 1, false)),
			want:  "attempt 1 executed 2 times"},
		{name: "one attempt recorded twice",
			runs:  []sqlease.Run{run(1, "a", 1, ok)},
			rows:  []ledger.ExecRow{execRow(1, "a", 1), execRow(1, "a", 1)},
			execs: execs(1, "a", 1, true),
			want:  "recorded 2 times in the execs table"},
		{name: "execs row of no execution",
			runs:  []sqlease.Run{run(1, "a", 1, ok)},
			rows:  []ledger.ExecRow{execRow(1, "a", 1), execRow(2, "b", 2)},
			execs: execs(1, "a", 1, true),
			want:  "without an exec event of that worker and epoch"},
		{name: "execution of no run",
			rows:  []ledger.ExecRow{execRow(1, "a", 1)},
			execs: execs(1, "a", 1, true),
			want:  "no run row records it"},
		{name: "execution under another epoch than its run",
			runs:  []sqlease.Run{run(1, "a", 2, failed)},
			execs: execs(1, "a", 1, false),
			want:  "its run row says a@2"},
		{name: "success never recorded by its execution",
			runs:  []sqlease.Run{run(1, "a", 1, ok)},
			rows:  []ledger.ExecRow{execRow(1, "a", 1)},
			execs: execs(1, "a", 1, false),
			want:  "has 0 recorded exec events and 1 execs rows"},
		{name: "end without a start",
			runs:  []sqlease.Run{run(1, "a", 1, ok)},
			rows:  []ledger.ExecRow{execRow(1, "a", 1)},
			execs: join(execs(1, "a", 1, true), execs(1, "a", 1, true)[1:]),
			want:  "exec_done without exec: exec_done a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := ledger.CheckOccurrences(map[string]sqlease.Job{"j": {Name: "j"}}, c.runs, c.rows, c.execs)
			got := strings.Join(a.Violations, "\n")
			if c.want == "" && got != "" || !strings.Contains(got, c.want) {
				t.Errorf("violations:\n%s\nwant one with %q", got, c.want)
			}
		})
	}
}

// A wrong idempotency key or a run of another holder is named.
func TestCheckOccurrencesRunHandedOver(t *testing.T) {
	x := execs(1, "a", 1, true)
	x[0].Key, x[0].RunHolder = "j/else", "b"
	a := ledger.CheckOccurrences[report](nil, []sqlease.Run{run(1, "a", 1, sqlease.OutcomeSucceeded)}, []ledger.ExecRow{execRow(1, "a", 1)}, x)
	got := strings.Join(a.Violations, "\n")
	for _, want := range []string{`idempotency key "j/else"`, "worker a executed a run of holder b"} {
		if !strings.Contains(got, want) {
			t.Errorf("violations:\n%s\nwant one with %q", got, want)
		}
	}
}

// OneSuccess, the check of a test that sees only the runs, names an
// occurrence that succeeded twice and passes one that succeeded after a
// failure.
func TestOneSuccess(t *testing.T) {
	if err := ledger.OneSuccess([]sqlease.Run{run(1, "a", 1, sqlease.OutcomeFailed), run(2, "b", 2, sqlease.OutcomeSucceeded)}); err != nil {
		t.Errorf("a retry after a failure: %v", err)
	}
	err := ledger.OneSuccess([]sqlease.Run{run(1, "a", 1, sqlease.OutcomeSucceeded), run(2, "b", 2, sqlease.OutcomeSucceeded)})
	if err == nil || !strings.Contains(err.Error(), "j@"+ledger.FormatSF(sf)+" completed 2 times") {
		t.Errorf("two successes: %v", err)
	}
}

// An occurrence on a whole second formats without a fraction ("…:09Z"),
// which sorts after "…:09.2Z" as a string: Of must order by time.
func TestOfOrdersByTime(t *testing.T) {
	base := time.Date(2026, 11, 22, 4, 46, 8, 800_000_000, time.UTC)
	var runs []sqlease.Run
	for i := range 3 {
		runs = append(runs, sqlease.Run{Job: "j", ScheduledFor: base.Add(time.Duration(i) * 200 * time.Millisecond), Attempt: 1})
	}
	a := ledger.CheckOccurrences[report](map[string]sqlease.Job{"j": {Name: "j"}}, runs, nil, nil)
	occs := a.Of("j")
	for i, o := range occs {
		if want := ledger.FormatSF(runs[i].ScheduledFor); o.Occ.SF != want {
			t.Fatalf("occurrence %d is %s, want %s", i, o.Occ.SF, want)
		}
	}
}

// ReadExecs reads an execs table in id order, SQLite's text timestamps
// included, and refuses a table name that is no plain identifier.
func TestReadExecs(t *testing.T) {
	db := openSQLite(t)
	ctx := context.Background()
	if _, err := db.Exec(`CREATE TABLE t_execs (id INTEGER PRIMARY KEY, job TEXT, scheduled_for TEXT, attempt INTEGER, holder TEXT, epoch INTEGER, pid INTEGER, db_time TEXT)`); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int{2, 1} {
		if _, err := db.Exec(`INSERT INTO t_execs VALUES (?, 'j', ?, ?, 'a', 7, 42, '2026-11-22 04:46:09.250')`, id, ledger.FormatSF(sf), id); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := ledger.ReadExecs(ctx, db, "t_execs")
	if err != nil {
		t.Fatal(err)
	}
	want := ledger.ExecRow{ID: 1, Job: "j", SF: ledger.FormatSF(sf), Attempt: 1, Holder: "a", Epoch: 7, PID: 42, DBTime: sf.Add(250 * time.Millisecond)}
	if len(rows) != 2 || rows[0] != want || rows[1].ID != 2 {
		t.Errorf("rows %v, want %v first of 2", rows, want)
	}
	if _, err := ledger.ReadExecs(ctx, db, "t_execs; DROP TABLE t_execs"); err == nil || !strings.Contains(err.Error(), "not a plain identifier") {
		t.Errorf("a table name with SQL in it: %v", err)
	}
}
