package schedproc

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/ledger"
	"github.com/sqlease/sqlease/sqlstore"
)

// ExecRow is one row of the execs table.
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

// Exec is one execution as the worker reported it: its exec event and, if
// printed, the exec_done that followed.
type Exec struct {
	Event
	Done    bool   // exec_done was printed
	DoneErr string // its error: the execution's record was not written
}

// OK reports whether the execution was recorded.
func (x Exec) OK() bool { return x.Done && x.DoneErr == "" }

// OccInfo is everything known about one occurrence.
type OccInfo struct {
	Occ   Occurrence
	Runs  []sqlease.Run // the runs table, by attempt
	Execs []Exec        // exec events, by attempt
	Rows  []ExecRow     // execs table, by attempt
}

// Succeeded returns the occurrence's succeeded run, if any.
func (o *OccInfo) Succeeded() (sqlease.Run, bool) {
	for _, r := range o.Runs {
		if r.Outcome == sqlease.OutcomeSucceeded {
			return r, true
		}
	}
	return sqlease.Run{}, false
}

// Run returns the run of one attempt.
func (o *OccInfo) Run(attempt int) (sqlease.Run, bool) {
	for _, r := range o.Runs {
		if r.Attempt == attempt {
			return r, true
		}
	}
	return sqlease.Run{}, false
}

// Analysis is the cross-check of events, the execs table and the runs table.
type Analysis struct {
	Occ        map[Occurrence]*OccInfo
	Jobs       map[string]sqlease.Job
	Rows       []ExecRow
	Execs      []Exec
	Violations []string
}

// Of returns the occurrences of one job ordered by scheduled_for.
func (a *Analysis) Of(job string) []*OccInfo {
	var out []*OccInfo
	for o, info := range a.Occ {
		if o.Job == job {
			out = append(out, info)
		}
	}
	// By time, not by string: RFC 3339 drops a zero fraction, so "…:09Z"
	// would sort after "…:09.2Z".
	at := func(o *OccInfo) time.Time { t, _ := time.Parse(time.RFC3339Nano, o.Occ.SF); return t }
	sort.Slice(out, func(i, j int) bool { return at(out[i]).Before(at(out[j])) })
	return out
}

func (a *Analysis) bad(format string, args ...any) {
	a.Violations = append(a.Violations, fmt.Sprintf(format, args...))
}

// Collect reads the jobs, their runs and the execs table after the workers
// have stopped, and checks them against the events:
//
//   - an attempt (job, scheduled_for, attempt) executed at most once (one
//     exec event, at most one execs row);
//   - every execs row was announced by an exec event of the same worker,
//     holder and epoch, and every exec event carries the run the scheduler
//     recorded for that attempt (holder, epoch) and the idempotency key
//     job/scheduled_for;
//   - an occurrence executed more than once only by retries: every attempt
//     executed before the last one was recorded failed, timed_out or
//     abandoned, never succeeded or left running;
//   - at most one succeeded run per occurrence, and each corresponds to
//     exactly one recorded execution of that attempt.
//
// Coverage (which occurrences must exist) is up to the test.
func Collect(ctx context.Context, db *sql.DB, st *sqlstore.Store, prefix string, events []Event) (*Analysis, error) {
	jobs := map[string]sqlease.Job{}
	var runs []sqlease.Run
	for after := ""; ; {
		page, err := st.Jobs(ctx, after, 500)
		if err != nil {
			return nil, err
		}
		for _, j := range page {
			jobs[j.Name] = j.Job
			rs, err := st.Runs(ctx, j.Name, 1_000_000)
			if err != nil {
				return nil, err
			}
			runs = append(runs, rs...)
			after = j.Name
		}
		if len(page) < 500 {
			break
		}
	}
	rows, err := readExecs(ctx, db, prefix)
	if err != nil {
		return nil, err
	}
	return Analyze(jobs, runs, rows, events), nil
}

// Analyze is Collect on data already read: the jobs, every run of them,
// the execs table and the workers' events.
func Analyze(jobs map[string]sqlease.Job, runs []sqlease.Run, rows []ExecRow, events []Event) *Analysis {
	a := &Analysis{Occ: map[Occurrence]*OccInfo{}, Jobs: jobs, Rows: rows}
	occ := func(o Occurrence) *OccInfo {
		if a.Occ[o] == nil {
			a.Occ[o] = &OccInfo{Occ: o}
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
	pending := map[execID]int{} // index in a.Execs of an exec awaiting its exec_done
	for _, e := range events {
		switch e.Ev {
		case EvExec:
			id := execID{e.Holder, e.Occ(), e.Attempt, e.Epoch}
			pending[id] = len(a.Execs)
			a.Execs = append(a.Execs, Exec{Event: e})
		case EvExecDone:
			id := execID{e.Holder, e.Occ(), e.Attempt, e.Epoch}
			i, ok := pending[id]
			if !ok {
				a.bad("exec_done without exec: %v", e)
				continue
			}
			delete(pending, id)
			a.Execs[i].Done, a.Execs[i].DoneErr = true, e.Err
		}
	}
	for _, x := range a.Execs {
		info := occ(x.Occ())
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

func (a *Analysis) checkOcc(info *OccInfo) {
	o := info.Occ
	byAttempt := map[int][]Exec{}
	for _, x := range info.Execs {
		byAttempt[x.Attempt] = append(byAttempt[x.Attempt], x)
		if want := o.Job + "/" + o.SF; x.Key != want {
			a.bad("%s: execution with idempotency key %q, want %q: %v", o, x.Key, want, x.Event)
		}
		if x.RunHolder != x.Holder {
			a.bad("%s: worker %s executed a run of holder %s: %v", o, x.Holder, x.RunHolder, x.Event)
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
			a.bad("DUPLICATE: %s attempt %d executed %d times: %v", o, attempt, len(xs), events(xs))
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
	succeeded := 0
	for _, r := range info.Runs {
		if r.Outcome != sqlease.OutcomeSucceeded {
			continue
		}
		succeeded++
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
	if succeeded > 1 {
		a.bad("DUPLICATE: %s completed %d times: %v", o, succeeded, info.Runs)
	}
}

func events(xs []Exec) string {
	var b strings.Builder
	for _, x := range xs {
		fmt.Fprintf(&b, "\n      %v", x.Event)
	}
	return b.String()
}

func readExecs(ctx context.Context, db *sql.DB, prefix string) ([]ExecRow, error) {
	rows, err := db.QueryContext(ctx, `SELECT id, job, scheduled_for, attempt, holder, epoch, pid, db_time FROM `+ExecsTable(prefix)+` ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("read execs: %w", err)
	}
	defer rows.Close()
	var out []ExecRow
	for rows.Next() {
		var r ExecRow
		var ts ledger.Time
		if err := rows.Scan(&r.ID, &r.Job, &r.SF, &r.Attempt, &r.Holder, &r.Epoch, &r.PID, &ts); err != nil {
			return nil, fmt.Errorf("read execs: %w", err)
		}
		r.DBTime = ts.T
		out = append(out, r)
	}
	return out, rows.Err()
}

// MigrateExecs creates the execs table and the fault-injection table and
// trigger (the store's tables must exist).
func MigrateExecs(ctx context.Context, db *sql.DB, dialect, prefix string) error {
	mig, _, err := execsSQL(dialect, prefix)
	if err != nil {
		return err
	}
	faults, err := faultSQL(dialect, prefix)
	if err != nil {
		return err
	}
	for _, stmt := range append([]string{mig}, faults...) {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("schedproc: migrate: %w", err)
		}
	}
	return nil
}
