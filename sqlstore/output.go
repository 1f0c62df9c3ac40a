package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/sqlease/sqlease"
)

// OutputQueries is the SQL text of the run output table,
// {prefix}_run_output: the kept tail of an action's output, one row per run
// that produced any, keyed like the run (job_id, scheduled_for, attempt).
// It is a table of its own rather than a column of the runs table so that
// older schemas gain it by CREATE TABLE alone, and so that the ledger's rows
// (which a finish updates in place, on PostgreSQL as a HOT update) stay
// small. Its CREATE statements are in JobQueries.Migrations. A dialect
// without it (all fields empty) keeps no output.
type OutputQueries struct {
	// Insert: (job_id, scheduled_for, attempt, output). finished_at = now.
	// Run in the transaction of the finish that released the run's lock,
	// after it: a finish whose lock is lost rolls it back with it. A row
	// already there for the run is left as it is.
	Insert string
	// Between: (job_id, oldest scheduled_for, newest scheduled_for).
	// (scheduled_for, attempt, output) of the job's outputs in that range,
	// ends included.
	Between string
	// DeleteJob: (job_id). Deletes the job's outputs, in DeleteJob's
	// transaction.
	DeleteJob string
	// Prune: (older_than_ms). Deletes outputs whose finish is older than
	// that, as PruneRuns does with their runs.
	Prune string
}

// MaxOutputBytes bounds a run's output the store writes: sqlstore refuses
// nothing the scheduler keeps (scheduler.MaxOutputLimit plus its marker),
// and one run's output must never fail its finish.
const MaxOutputBytes = 4 << 20

// CleanOutput makes a run's output storable in every dialect, as CleanText
// does for an error (NUL and invalid UTF-8 become U+FFFD) but bounded by
// MaxOutputBytes and keeping the end: the tail is what was asked for.
func CleanOutput(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
	if len(s) <= MaxOutputBytes {
		return s
	}
	cut := len(s) - MaxOutputBytes
	for cut < len(s) && s[cut]&0xC0 == 0x80 { // not a rune start
		cut++
	}
	return s[cut:]
}

func (s *Store) oq() *OutputQueries { return &s.d.Jobs.Output }

// insertOutput writes the output of run (none when empty) in tx, the
// transaction of its finish.
func (s *Store) insertOutput(ctx context.Context, tx *sql.Tx, jobID int64, run sqlease.Run, output string) error {
	args := s.outputArgs(jobID, run, output)
	if args == nil {
		return nil
	}
	if _, err := tx.ExecContext(ctx, s.oq().Insert, args...); err != nil {
		return fmt.Errorf("keep output: %w", s.classify(err))
	}
	return nil
}

// outputArgs are the output insert's arguments for run's output, nil when
// there is none to keep.
func (s *Store) outputArgs(jobID int64, run sqlease.Run, output string) []any {
	if output == "" || s.oq().Insert == "" {
		return nil
	}
	return []any{jobID, s.timeArg(run.ScheduledFor), run.Attempt, CleanOutput(output)}
}

// hasOutput reports whether any request of a batch finish carries output
// this dialect keeps.
func (s *Store) hasOutput(reqs []FinishReq) bool {
	if s.oq().Insert == "" {
		return false
	}
	for _, r := range reqs {
		if r.Finish.Output != "" {
			return true
		}
	}
	return false
}

// addOutputs fills in the Output of runs (a page of Runs: all of one job)
// from the output table: one query for the page, over its range of
// occurrences.
func (s *Store) addOutputs(ctx context.Context, runs []sqlease.Run) error {
	err := s.fillRuns(ctx, runs, s.oq().Between, func(r *sqlease.Run, v string) { r.Output = v })
	if err != nil {
		return fmt.Errorf("read run output: %w", err)
	}
	return nil
}

// fillRuns reads, with query (job_id, from, to → scheduled_for, attempt,
// value; "" when the dialect has none), the values kept beside a page of
// runs of one job over its range of occurrences, in one query, and gives
// each to set with its run.
func (s *Store) fillRuns(ctx context.Context, runs []sqlease.Run, query string, set func(*sqlease.Run, string)) error {
	if len(runs) == 0 || query == "" {
		return nil
	}
	lo, hi := runs[0].ScheduledFor, runs[0].ScheduledFor
	for _, r := range runs[1:] {
		if r.ScheduledFor.Before(lo) {
			lo = r.ScheduledFor
		}
		if r.ScheduledFor.After(hi) {
			hi = r.ScheduledFor
		}
	}
	type key struct {
		at      int64
		attempt int
	}
	at := make(map[key]int, len(runs))
	for i, r := range runs {
		if r.JobID == runs[0].JobID {
			at[key{r.ScheduledFor.UnixNano(), r.Attempt}] = i
		}
	}
	rows, err := s.db.QueryContext(ctx, query, runs[0].JobID, s.timeArg(lo), s.timeArg(hi))
	var sf dbTime
	var attempt int
	var v string
	_, err = scanRows(rows, err, func(sc scanner) error {
		if err := sc.Scan(&sf, &attempt, &v); err != nil {
			return err
		}
		if i, ok := at[key{sf.T.UnixNano(), attempt}]; ok {
			set(&runs[i], v)
		}
		return nil
	})
	return s.classify(err)
}

// pruneOutputs deletes the outputs older than retention and reports how
// many.
func (s *Store) pruneOutputs(ctx context.Context, retention time.Duration) (int64, error) {
	return s.pruneOlder(ctx, s.oq().Prune, "run output", retention)
}

// pruneOlder runs prune, a dialect's Prune of the rows older than a number
// of milliseconds (empty: it keeps no such rows), for retention and reports
// how many rows went; what names them in its error.
func (s *Store) pruneOlder(ctx context.Context, prune, what string, retention time.Duration) (int64, error) {
	if prune == "" {
		return 0, nil
	}
	res, err := s.db.ExecContext(ctx, prune, retention.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("prune %s: %w", what, s.classify(err))
	}
	return res.RowsAffected()
}
