package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sqlease/sqlease"
)

// The occurrence checker: the scheduler's side of "nothing done twice".
// Where the rows above are one epoch's actions, an occurrence is one
// (job, scheduled_for), and what must hold of it is read from three
// accounts: the scheduler's runs table, the executors' reports of what they
// ran, and a table the executions wrote themselves (an execs table: a plain
// table without a unique key, so that a duplicate stays visible).

// Occurrence is one (job, scheduled_for); SF is FormatSF of scheduled_for.
type Occurrence struct {
	Job string
	SF  string
}

func (o Occurrence) String() string { return o.Job + "@" + o.SF }

// FormatSF is how scheduled_for times are keyed: RFC 3339 with nanoseconds,
// UTC (the time part of Run.IdempotencyKey).
func FormatSF(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ExecRow is one row of an execs table.
type ExecRow struct {
	ID      int64
	Job     string
	SF      string
	Attempt int
	Holder  string
	Epoch   int64
	PID     int
	DBTime  time.Time
}

func (r ExecRow) String() string {
	return fmt.Sprintf("#%d %s@%s#%d by %s@%d at %s", r.ID, r.Job, r.SF, r.Attempt, r.Holder, r.Epoch, r.DBTime.Format("15:04:05.000000"))
}

// ReadExecs reads an execs table (columns id, job, scheduled_for, attempt,
// holder, epoch, pid, db_time) in id order.
func ReadExecs(ctx context.Context, db *sql.DB, table string) ([]ExecRow, error) {
	if !identRE.MatchString(table) {
		return nil, fmt.Errorf("ledger: execs table %q is not a plain identifier", table)
	}
	return query(ctx, db, "read execs", `SELECT id, job, scheduled_for, attempt, holder, epoch, pid, db_time FROM `+table+` ORDER BY id`, func(rows *sql.Rows, r *ExecRow) error {
		var ts Time
		err := rows.Scan(&r.ID, &r.Job, &r.SF, &r.Attempt, &r.Holder, &r.Epoch, &r.PID, &ts)
		r.DBTime = ts.T
		return err
	})
}

// Exec is one execution of an attempt as its executor reported it: the
// report R (a worker's event, say) and what the checker reads of it.
type Exec[R fmt.Stringer] struct {
	Occurrence
	Attempt int
	Holder  string // who executed
	Epoch   int64  // the run's fencing epoch
	// RunHolder and Key are the run handed to the executor: its holder and
	// its idempotency key.
	RunHolder string
	Key       string
	Gate      time.Time // the executor's clock just before the gate let it through
	// Done: the executor reported the execution's end; DoneErr: its record
	// was not written.
	Done    bool
	DoneErr string
	Report  R
}

// OK reports whether the execution was recorded.
func (x Exec[R]) OK() bool { return x.Done && x.DoneErr == "" }

func (x Exec[R]) String() string { return x.Report.String() }

// OccInfo is everything known about one occurrence, each list by attempt.
type OccInfo[R fmt.Stringer] struct {
	Occ   Occurrence
	Runs  []sqlease.Run // the runs table
	Execs []Exec[R]     // the executors' reports
	Rows  []ExecRow     // the execs table
}

// Succeeded returns the occurrence's succeeded run, if any.
func (o *OccInfo[R]) Succeeded() (sqlease.Run, bool) {
	for _, r := range o.Runs {
		if r.Outcome == sqlease.OutcomeSucceeded {
			return r, true
		}
	}
	return sqlease.Run{}, false
}

// Run returns the run of one attempt.
func (o *OccInfo[R]) Run(attempt int) (sqlease.Run, bool) {
	for _, r := range o.Runs {
		if r.Attempt == attempt {
			return r, true
		}
	}
	return sqlease.Run{}, false
}

// Occurrences is the cross-check of the executors' reports, the execs table
// and the runs table.
type Occurrences[R fmt.Stringer] struct {
	Occ        map[Occurrence]*OccInfo[R]
	Jobs       map[string]sqlease.Job
	Rows       []ExecRow
	Execs      []Exec[R] // the starts, each with its end if reported
	Violations []string
}

// Of returns the occurrences of one job ordered by scheduled_for.
func (a *Occurrences[R]) Of(job string) []*OccInfo[R] {
	var out []*OccInfo[R]
	for o, info := range a.Occ {
		if o.Job == job {
			out = append(out, info)
		}
	}
	// By time, not by string: RFC 3339 drops a zero fraction, so "…:09Z"
	// would sort after "…:09.2Z".
	at := func(o *OccInfo[R]) time.Time { t, _ := time.Parse(time.RFC3339Nano, o.Occ.SF); return t }
	sort.Slice(out, func(i, j int) bool { return at(out[i]).Before(at(out[j])) })
	return out
}

func (a *Occurrences[R]) bad(format string, args ...any) {
	a.Violations = append(a.Violations, fmt.Sprintf(format, args...))
}

// CheckOccurrences groups the jobs' runs, the executors' reports and the
// execs table by occurrence and checks each:
//
//   - an attempt (job, scheduled_for, attempt) executed at most once (one
//     execution reported, at most one execs row);
//   - every execs row was announced by a report of the same executor,
//     holder and epoch, and every report carries the run the scheduler
//     recorded for that attempt (holder, epoch) and the idempotency key
//     job/scheduled_for;
//   - an occurrence executed more than once only by retries: every attempt
//     executed before the last one was recorded failed, timed_out or
//     abandoned, never succeeded or left running;
//   - at most one succeeded run per occurrence (OneSuccess), and each
//     corresponds to exactly one recorded execution of that attempt.
//
// reports are in the order the executors made them: a start (Done false),
// and, for an execution that ended, a report with Done set (and DoneErr)
// that closes the open start of the same holder, occurrence, attempt and
// epoch. Coverage (which occurrences must exist) is up to the test.
func CheckOccurrences[R fmt.Stringer](jobs map[string]sqlease.Job, runs []sqlease.Run, rows []ExecRow, reports []Exec[R]) *Occurrences[R] {
	a := &Occurrences[R]{Occ: map[Occurrence]*OccInfo[R]{}, Jobs: jobs, Rows: rows}
	occ := func(o Occurrence) *OccInfo[R] {
		if a.Occ[o] == nil {
			a.Occ[o] = &OccInfo[R]{Occ: o}
		}
		return a.Occ[o]
	}
	for _, r := range runs {
		info := occ(Occurrence{Job: r.Job, SF: FormatSF(r.ScheduledFor)})
		info.Runs = append(info.Runs, r)
	}
	for _, r := range rows {
		info := occ(Occurrence{Job: r.Job, SF: r.SF})
		info.Rows = append(info.Rows, r)
	}

	type execID struct {
		holder  string
		occ     Occurrence
		attempt int
		epoch   int64
	}
	pending := map[execID]int{} // index in a.Execs of a start awaiting its end
	for _, x := range reports {
		id := execID{x.Holder, x.Occurrence, x.Attempt, x.Epoch}
		if !x.Done {
			pending[id] = len(a.Execs)
			a.Execs = append(a.Execs, x)
			continue
		}
		i, ok := pending[id]
		if !ok {
			a.bad("exec_done without exec: %v", x)
			continue
		}
		delete(pending, id)
		a.Execs[i].Done, a.Execs[i].DoneErr = true, x.DoneErr
	}
	for _, x := range a.Execs {
		info := occ(x.Occurrence)
		info.Execs = append(info.Execs, x)
	}

	for _, info := range a.Occ {
		sort.SliceStable(info.Runs, func(i, j int) bool { return info.Runs[i].Attempt < info.Runs[j].Attempt })
		sort.SliceStable(info.Execs, func(i, j int) bool { return info.Execs[i].Attempt < info.Execs[j].Attempt })
		sort.SliceStable(info.Rows, func(i, j int) bool { return info.Rows[i].Attempt < info.Rows[j].Attempt })
		a.checkOcc(info)
	}
	sort.Strings(a.Violations)
	return a
}

func (a *Occurrences[R]) checkOcc(info *OccInfo[R]) {
	o := info.Occ
	byAttempt := map[int][]Exec[R]{}
	for _, x := range info.Execs {
		byAttempt[x.Attempt] = append(byAttempt[x.Attempt], x)
		if want := o.Job + "/" + o.SF; x.Key != want {
			a.bad("%s: execution with idempotency key %q, want %q: %v", o, x.Key, want, x)
		}
		if x.RunHolder != x.Holder {
			a.bad("%s: worker %s executed a run of holder %s: %v", o, x.Holder, x.RunHolder, x)
		}
		r, ok := info.Run(x.Attempt)
		switch {
		case !ok:
			a.bad("%s: attempt %d executed by %s@%d but no run row records it", o, x.Attempt, x.Holder, x.Epoch)
		case r.Holder != x.Holder || r.Epoch != x.Epoch:
			a.bad("%s: attempt %d executed by %s@%d but its run row says %s@%d", o, x.Attempt, x.Holder, x.Epoch, r.Holder, r.Epoch)
		}
	}
	for attempt, xs := range byAttempt {
		if len(xs) > 1 {
			var b strings.Builder
			for _, x := range xs {
				fmt.Fprintf(&b, "\n      %v", x)
			}
			a.bad("DUPLICATE: %s attempt %d executed %d times: %s", o, attempt, len(xs), b.String())
		}
	}
	rowsBy := map[int][]ExecRow{}
	for _, r := range info.Rows {
		rowsBy[r.Attempt] = append(rowsBy[r.Attempt], r)
		found := false
		for _, x := range byAttempt[r.Attempt] {
			if x.Holder == r.Holder && x.Epoch == r.Epoch {
				found = true
			}
		}
		if !found {
			a.bad("%s: execs row %v without an exec event of that worker and epoch", o, r)
		}
	}
	for attempt, rs := range rowsBy {
		if len(rs) > 1 {
			a.bad("DUPLICATE: %s attempt %d recorded %d times in the execs table: %v", o, attempt, len(rs), rs)
		}
	}
	// Re-executions must be explained by a failed or abandoned attempt.
	for i, x := range info.Execs {
		if i == len(info.Execs)-1 {
			break
		}
		later := info.Execs[len(info.Execs)-1]
		r, ok := info.Run(x.Attempt)
		if !ok {
			continue // reported above
		}
		switch r.Outcome {
		case sqlease.OutcomeFailed, sqlease.OutcomeAbandoned, sqlease.OutcomeTimedOut:
		default:
			a.bad("DUPLICATE: %s executed again as attempt %d by %s@%d although attempt %d (by %s@%d) is %s",
				o, later.Attempt, later.Holder, later.Epoch, x.Attempt, x.Holder, x.Epoch, r.Outcome)
		}
	}
	for _, r := range info.Runs {
		if r.Outcome != sqlease.OutcomeSucceeded {
			continue
		}
		n := 0
		for _, x := range byAttempt[r.Attempt] {
			if x.OK() && x.Holder == r.Holder && x.Epoch == r.Epoch {
				n++
			}
		}
		if n != 1 || len(rowsBy[r.Attempt]) != 1 {
			a.bad("%s: succeeded run (attempt %d by %s@%d) has %d recorded exec events and %d execs rows, want 1 and 1",
				o, r.Attempt, r.Holder, r.Epoch, n, len(rowsBy[r.Attempt]))
		}
	}
	if v := OneSuccess(info.Runs); v != nil {
		a.bad("%s", v)
	}
}

// OneSuccess returns a violation, nil if none, when runs (all of one
// occurrence) hold more than one succeeded run: the occurrence was done
// twice. It is the check for a test that reads only the runs (the fault
// suite, through the runs API); CheckOccurrences makes it on every
// occurrence.
func OneSuccess(runs []sqlease.Run) error {
	var ok []sqlease.Run
	for _, r := range runs {
		if r.Outcome == sqlease.OutcomeSucceeded {
			ok = append(ok, r)
		}
	}
	if len(ok) < 2 {
		return nil
	}
	o := Occurrence{Job: ok[0].Job, SF: FormatSF(ok[0].ScheduledFor)}
	return fmt.Errorf("DUPLICATE: %s completed %d times: %v", o, len(ok), runs)
}
