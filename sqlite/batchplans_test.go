package sqlite_test

import (
	"strings"
	"testing"

	"github.com/sqlease/sqlease/sqlstore"
)

// queryPlan is SQLite's EXPLAIN QUERY PLAN of query, one step per line.
func queryPlan(t *testing.T, st *sqlstore.Store, query string, args ...any) string {
	t.Helper()
	rows, err := st.DB().QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// TestBatchStatementsSeek: the statements of a batch (a claim of many jobs
// by id, a start per run, the ledger's attempt count every read of a job
// makes) find their rows by key, never by a scan of the jobs or runs
// table, whose cost would grow with the table, once per statement.
func TestBatchStatementsSeek(t *testing.T) {
	st := newStore(t)
	q := st.Dialect().Jobs
	const at = "2026-01-01 00:00:00.000"
	for name, c := range map[string]struct {
		query string
		args  []any
	}{
		"ClaimJobs":  {q.ClaimJobs, []any{"[1,2,3]", "h", 1}},
		"StartRunIf": {q.StartRunIf, []any{1, "h", 1, "j", at, 1, 1}},
		"ReleaseJob": {q.ReleaseJob, []any{nil, 0, nil, 1, "h", 1}},
		"FinishRun":  {q.FinishRun, []any{"succeeded", nil, 1, at, 1}},
		"JobByName":  {q.JobByName, []any{"j"}},
	} {
		p := queryPlan(t, st, c.query, c.args...)
		if strings.Contains(p, "SCAN sqlease_jobs") || strings.Contains(p, "SCAN sqlease_runs") || strings.Contains(p, "SCAN r") {
			t.Errorf("%s scans a table:\n%s", name, p)
		}
		t.Logf("%s:\n%s", name, p)
	}
}
