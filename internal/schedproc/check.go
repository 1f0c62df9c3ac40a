package schedproc

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/ledger"
	"github.com/sqlease/sqlease/sqlstore"
)

// The checks are internal/ledger's occurrence checker, on this package's
// events.
type (
	// ExecRow is one row of the execs table.
	ExecRow = ledger.ExecRow
	// Exec is one execution as the worker reported it: its exec event and,
	// if printed, the exec_done that followed.
	Exec = ledger.Exec[Event]
	// OccInfo is everything known about one occurrence.
	OccInfo = ledger.OccInfo[Event]
	// Analysis is the cross-check of events, the execs table and the runs
	// table.
	Analysis = ledger.Occurrences[Event]
)

// Collect reads the jobs, their runs and the execs table after the workers
// have stopped, and checks them against the events (ledger.CheckOccurrences
// says what holds). Coverage (which occurrences must exist) is up to the
// test.
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
	rows, err := ledger.ReadExecs(ctx, db, ExecsTable(prefix))
	if err != nil {
		return nil, err
	}
	return Analyze(jobs, runs, rows, events), nil
}

// Analyze is Collect on data already read: the jobs, every run of them,
// the execs table and the workers' events.
func Analyze(jobs map[string]sqlease.Job, runs []sqlease.Run, rows []ExecRow, events []Event) *Analysis {
	var reports []Exec
	for _, e := range events {
		if e.Ev != EvExec && e.Ev != EvExecDone {
			continue
		}
		reports = append(reports, Exec{
			Occurrence: e.Occ(), Attempt: e.Attempt, Holder: e.Holder, Epoch: e.Epoch,
			RunHolder: e.RunHolder, Key: e.Key, Gate: e.GateT,
			Done: e.Ev == EvExecDone, DoneErr: e.Err, Report: e,
		})
	}
	return ledger.CheckOccurrences(jobs, runs, rows, reports)
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
