package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
)

// TestBatchPlansUseTheKey: the batch statements reach the jobs they name
// by the primary key at any batch size. Joined only to their unnest() of
// parameters, a finish of 512 runs was planned as a sequential scan of the
// whole jobs table (measured: 20,000 jobs, 18 ms of a 31 ms statement);
// with 100,000 jobs or a million that is every finish.
func TestBatchPlansUseTheKey(t *testing.T) {
	ctx := t.Context()
	st, prefix := newStoreWithPrefix(t)
	sched, err := scheduler.New(scheduler.Config{Store: st, Holder: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := sched.Create(ctx, sqlease.Job{Name: "model", LockTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
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
	for _, c := range []struct {
		name, text string
		args       []any
	}{
		{"FinishRuns", q.FinishRuns, []any{ids, epochs, holders, nexts, attempts, backoffs, outcomes, errs, sfs, runAttempts, outs}},
		{"StartRuns", q.StartRuns, []any{ids, epochs, sfs, attempts, names, holders, runEpochs}},
		{"ClaimStartJobs", q.ClaimStartJobs, []any{ids, "w", int64(1)}},
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
		after := strings.Join(preparedPlan(t, st.DB(), mode, q.ClaimStartAfter, `'w', 256, 0, now(), 10000`), "\n")
		if !strings.Contains(after, prefix+"_jobs_due") || !strings.Contains(after, "Index Cond: (ROW(next_run_at, id) > ROW(") {
			t.Errorf("ClaimStartAfter (%s) does not start its scan of %s_jobs_due at the cursor:\n%s", mode, prefix, after)
		}
		start := strings.Join(preparedPlan(t, st.DB(), mode, q.ClaimStart, `'w', 256, 0`), "\n")
		if !strings.Contains(start, prefix+"_jobs_due") || strings.Contains(start, "ROW(") {
			t.Errorf("ClaimStart (%s) does not scan %s_jobs_due from the start:\n%s", mode, prefix, start)
		}
		// A generic plan guesses that a LIMIT of a parameter keeps a tenth
		// of the rows; the claim's update must still reach them by key, not
		// by reading the table into a hash.
		for _, c := range []struct{ name, text, args string }{
			{"ClaimStart", q.ClaimStart, `'w', 256, 0`},
			{"ClaimStartAfter", q.ClaimStartAfter, `'w', 256, 0, now(), 10000`},
			{"ClaimDue", q.ClaimDue, `'w', 256, 0`},
		} {
			if plan := strings.Join(preparedPlan(t, st.DB(), mode, c.text, c.args), "\n"); strings.Contains(plan, "Seq Scan on "+prefix+"_jobs") {
				t.Errorf("%s (%s) scans the whole jobs table:\n%s", c.name, mode, plan)
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

// preparedPlan is the plan of query prepared and executed with args (SQL
// literals) under plan_cache_mode mode.
func preparedPlan(t *testing.T, db *sql.DB, mode, query, args string) []string {
	t.Helper()
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, stmt := range []string{"SET plan_cache_mode = " + mode, "PREPARE plan_probe AS " + query} {
		if _, err := conn.ExecContext(t.Context(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	defer conn.ExecContext(context.Background(), "DEALLOCATE plan_probe; RESET plan_cache_mode")
	rows, err := conn.QueryContext(t.Context(), "EXPLAIN EXECUTE plan_probe("+args+")")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
