package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
)

// TestBatchPlansUseTheKey: the batch statements reach the jobs they name
// by the primary key at any batch size. Joined only to their unnest() of
// parameters, a finish of 512 runs was planned as a sequential scan of the
// whole jobs table (measured: 20,000 jobs, 18 ms of a 31 ms statement);
// with 100,000 jobs or a million that is every finish.
func TestBatchPlansUseTheKey(t *testing.T) {
	ctx := t.Context()
	st, prefix := newStoreWithPrefix(t)
	createJobs(t, st, sqlease.Job{Name: "model", LockTimeout: time.Minute})
	// 20,000 copies of it, then fresh statistics.
	if _, err := st.DB().ExecContext(ctx, `INSERT INTO `+prefix+`_jobs (name, spec_hash, schedule, action, missed_runs,
	skip_if_older_than_ms, max_attempts, backoff_ms, lock_timeout_ms, paused, next_run_at, created_at, last_modified_at)
SELECT 'copy-' || g, spec_hash, schedule, action, missed_runs, skip_if_older_than_ms, max_attempts, backoff_ms,
	lock_timeout_ms, paused, next_run_at, created_at, last_modified_at
FROM `+prefix+`_jobs, generate_series(1, 20000) g WHERE name = 'model'`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx, `ANALYZE `+prefix+`_jobs`); err != nil {
		t.Fatal(err)
	}
	const n = 512
	ids, epochs, holders, nexts, attempts, backoffs := make([]int64, n), make([]int64, n), make([]string, n), make([]*time.Time, n), make([]int32, n), make([]*int64, n)
	outcomes, errs, sfs, runAttempts, outs := make([]string, n), make([]*string, n), make([]time.Time, n), make([]int32, n), make([]*string, n)
	names, runEpochs := make([]string, n), make([]int64, n)
	for i := range n {
		ids[i], epochs[i], holders[i], outcomes[i], sfs[i], runAttempts[i] = int64(100+i*30), 1, "w", "succeeded", time.Now(), 1
		attempts[i], names[i], runEpochs[i] = 1, fmt.Sprint("copy-", i), 1
	}
	q := st.Dialect().Jobs
	// The self-fenced statements' lease, held by the batches' holder.
	lease, err := st.Acquire(ctx, "lead", "w", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, text string
		args       []any
	}{
		{"FinishRuns", q.FinishRuns, []any{ids, epochs, holders, nexts, attempts, backoffs, outcomes, errs, sfs, runAttempts, outs}},
		{"StartRuns", q.StartRuns, []any{ids, epochs, sfs, attempts, names, holders, runEpochs}},
		{"ClaimStartJobs", q.ClaimStartJobs, []any{ids, "w", int64(1)}},
		{"FinishRunsFenced", q.FinishRunsFenced, []any{ids, epochs, holders, nexts, attempts, backoffs, outcomes, errs, sfs, runAttempts, outs, "lead", "w", lease.Epoch}},
		{"ClaimStartJobsFenced", q.ClaimStartJobsFenced, []any{ids, "w", lease.Epoch, "lead"}},
		{"ClaimStartJobsAheadFenced", q.ClaimStartJobsAheadFenced, []any{ids, "w", lease.Epoch, "lead", int64(5)}},
		{"ClaimJobs", q.ClaimJobs, []any{ids, "w", int64(1)}},
	} {
		plan := strings.Join(texts(t, st.DB(), "EXPLAIN "+c.text, c.args...), "\n")
		if strings.Contains(plan, "Seq Scan on "+prefix+"_jobs") {
			t.Errorf("%s with %d jobs scans the whole jobs table:\n%s", c.name, n, plan)
		}
	}
	// A claim from a cursor starts its scan of the due index at the cursor
	// (an index condition: the jobs before it, a worker's own in flight, are
	// not read), in the plan made for its parameters and in the generic plan
	// a prepared statement may switch to after five runs; without a cursor
	// there is no such condition.
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		after := strings.Join(preparedPlan(t, st.DB(), mode, "EXPLAIN", q.ClaimStartAfter, `'w', 256, 0, now(), 10000`), "\n")
		cursorCond := false
		for _, line := range strings.Split(after, "\n") {
			cursorCond = cursorCond || strings.Contains(line, "Index Cond: ") && strings.Contains(line, "(ROW(next_run_at, id) > ROW(")
		}
		if !strings.Contains(after, prefix+"_jobs_due") || !cursorCond {
			t.Errorf("ClaimStartAfter (%s) does not start its scan of %s_jobs_due at the cursor:\n%s", mode, prefix, after)
		}
		start := strings.Join(preparedPlan(t, st.DB(), mode, "EXPLAIN", q.ClaimStart, `'w', 256, 0`), "\n")
		if !strings.Contains(start, prefix+"_jobs_due") || strings.Contains(start, "ROW(") {
			t.Errorf("ClaimStart (%s) does not scan %s_jobs_due from the start:\n%s", mode, prefix, start)
		}
		// Run, under both kinds of plan: a generic plan guesses the
		// claim's size (a tenth of the due rows for a LIMIT of a
		// parameter, ten for an array), and no guess may turn a join into
		// work that grows with the square of the batch — a nested loop
		// matching every claimed row against every other, seen as rows
		// removed by a join filter (a leader's claim of 512 removed
		// 130,816 and took 27 ms instead of 3).
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprint(100 + i*30)
		}
		for _, c := range []struct{ name, text, args string }{
			{"ClaimStart", q.ClaimStart, `'w', 512, 0`},
			{"ClaimStartAfter", q.ClaimStartAfter, `'w', 512, 0, '-infinity', 0`},
			{"ClaimStartJobs", q.ClaimStartJobs, `ARRAY[` + strings.Join(ids, ",") + `]::bigint[], 'w', 1`},
			{"ClaimStartJobsFenced", q.ClaimStartJobsFenced, `ARRAY[` + strings.Join(ids, ",") + `]::bigint[], 'w', ` + fmt.Sprint(lease.Epoch) + `, 'lead'`},
			{"ClaimStartJobsAheadFenced", q.ClaimStartJobsAheadFenced, `ARRAY[` + strings.Join(ids, ",") + `]::bigint[], 'w', ` + fmt.Sprint(lease.Epoch) + `, 'lead', 5`},
		} {
			plan := preparedPlan(t, st.DB(), mode, "EXPLAIN (ANALYZE, TIMING OFF)", c.text, c.args)
			claimed := false
			for _, line := range plan {
				if strings.Contains(line, "Insert on "+prefix+"_runs") && strings.Contains(line, fmt.Sprintf("rows=%d ", n)) {
					claimed = true
				}
				var removed int
				if i := strings.Index(line, "Rows Removed by Join Filter: "); i >= 0 {
					fmt.Sscan(line[i+len("Rows Removed by Join Filter: "):], &removed)
				}
				if removed > n {
					t.Errorf("%s (%s) of %d jobs matched rows pairwise (%d removed by a join filter):\n%s", c.name, mode, n, removed, strings.Join(plan, "\n"))
					break
				}
			}
			if !claimed {
				t.Errorf("%s (%s) did not claim and start %d jobs:\n%s", c.name, mode, n, strings.Join(plan, "\n"))
			}
		}
	}
	// The leader's refresh reads the partial index of jobs with an
	// occurrence to come, from its cursor.
	since := time.Now().Add(-time.Minute)
	if plan := strings.Join(texts(t, st.DB(), "EXPLAIN "+q.Changed, since, since, int64(0), 1000), "\n"); !strings.Contains(plan, prefix+"_jobs_changed") {
		t.Errorf("Changed does not read the index %s_jobs_changed:\n%s", prefix, plan)
	}
}

// TestClaimsReadOnlyDueJobs: the statements that scan the due index stop
// at the jobs due now (their bound is a condition of the scan), and the
// claims reach the jobs they lock by the primary key. A trickle keeps
// few jobs due among many due later: with the bound a filter, each claim
// read every one of them (10,000 jobs due over the next 10 s: 7.3 ms of
// server time per claim of ~10), and a table under ~30,000 jobs was read
// whole by the claim's update.
func TestClaimsReadOnlyDueJobs(t *testing.T) {
	ctx := t.Context()
	st, prefix := newStoreWithPrefix(t)
	createJobs(t, st, sqlease.Job{Name: "model", LockTimeout: time.Minute})
	const due, later = 40, 10000
	// due jobs due a second ago, later ones from a minute on.
	if _, err := st.DB().ExecContext(ctx, `INSERT INTO `+prefix+`_jobs (name, spec_hash, schedule, action, missed_runs,
	skip_if_older_than_ms, max_attempts, backoff_ms, lock_timeout_ms, paused, next_run_at, created_at, last_modified_at)
SELECT 'copy-' || g, spec_hash, schedule, action, missed_runs, skip_if_older_than_ms, max_attempts, backoff_ms, lock_timeout_ms, paused,
	CASE WHEN g <= $1 THEN now() - interval '1 second' ELSE now() + interval '1 minute' + g * interval '1 millisecond' END,
	created_at, last_modified_at
FROM `+prefix+`_jobs, generate_series(1, $2::int) g WHERE name = 'model'`, due, due+later); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx, `DELETE FROM `+prefix+`_jobs WHERE name = 'model'`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx, `ANALYZE `+prefix+`_jobs`); err != nil {
		t.Fatal(err)
	}
	q := st.Dialect().Jobs
	// The due index's scan: an index scan, or a bitmap scan of the index.
	scans := []string{"Index Scan using " + prefix + "_jobs_due ", "Bitmap Index Scan on " + prefix + "_jobs_due "}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		for _, c := range []struct{ name, text, args string }{
			{"ClaimStart", q.ClaimStart, `'w', 256, 0`},
			{"ClaimStartAfter", q.ClaimStartAfter, `'w', 256, 0, '-infinity', 0`},
			{"ClaimStartAhead", q.ClaimStartAhead, `'w', 256, 0, 5`},
			{"ClaimDue", q.ClaimDue, `'w', 256, 0`},
			{"DueWindow", q.DueWindow, `1000, 5000`},
		} {
			plan := preparedPlan(t, st.DB(), mode, "EXPLAIN (ANALYZE, TIMING OFF)", c.text, c.args)
			text := strings.Join(plan, "\n")
			if strings.Contains(text, "Seq Scan on "+prefix+"_jobs") {
				t.Errorf("%s (%s) reads the whole jobs table:\n%s", c.name, mode, text)
			}
			read := -1
			for _, line := range plan {
				for _, scan := range scans {
					if strings.Contains(line, scan) {
						if j := strings.Index(line, "(actual rows="); j >= 0 {
							fmt.Sscan(line[j+len("(actual rows="):], &read)
						}
					}
				}
			}
			// A bitmap scan counts the index's dead entries too: the
			// claims above, rolled back, leave some where their update
			// could not stay on its page (CI: 71 with 40 due). Read whole,
			// it is every one of the later jobs'.
			if read < due || read >= later/10 {
				t.Errorf("%s (%s) read %d entries of the due index with %d jobs due and %d due later:\n%s", c.name, mode, read, due, later, text)
			}
		}
	}
}

// preparedPlan is what explain (EXPLAIN and its options) says of query,
// prepared and executed with args (SQL literals) under plan_cache_mode
// mode, in a transaction that is rolled back.
func preparedPlan(t *testing.T, db *sql.DB, mode, explain, query, args string) []string {
	t.Helper()
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, stmt := range []string{"SET LOCAL plan_cache_mode = " + mode, "PREPARE plan_probe AS " + query} {
		if _, err := tx.ExecContext(t.Context(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	// A prepared statement outlives a rollback.
	defer tx.ExecContext(context.Background(), "DEALLOCATE plan_probe")
	return texts(t, tx, explain+" EXECUTE plan_probe("+args+")")
}
