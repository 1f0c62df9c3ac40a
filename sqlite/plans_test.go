package sqlite_test

import (
	"strings"
	"testing"

	"github.com/sqlease/sqlease/sqlstore"
)

// TestChangedSeeksBothColumns: the leader's change cursor seeks the index by
// the stamp and the id. With the row value (last_modified_at, id) > (?, ?)
// SQLite sought by the stamp alone and filtered the id, so every page of a
// refresh re-scanned the rows sharing the cursor's stamp: 140 s to read a
// million jobs created with one stamp, now 3.8 s (sqlease-bench -bench
// memory -dialects sqlite).
func TestChangedSeeksBothColumns(t *testing.T) {
	st := newStore(t)
	p := queryPlan(t, st, st.Dialect().Jobs.Changed, "2026-01-01 00:00:00.000", "2026-01-01 00:00:00.000", 1, 1000)
	if !strings.Contains(p, "last_modified_at=? AND id>?") || strings.Contains(p, "SCAN sqlease_jobs") {
		t.Fatalf("Changed does not seek the cursor's stamp and id:\n%s", p)
	}
}

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

// TestClaimPeekSeeksDueIndex: the read of a claim that may find nothing
// (ClaimPeek, an idle worker's one statement a poll) takes both its halves
// from the due index — the claimable jobs from its start, the next due
// time from one seek past now — never from a scan of the jobs table.
func TestClaimPeekSeeksDueIndex(t *testing.T) {
	st := newStore(t)
	p := queryPlan(t, st, st.Dialect().Jobs.ClaimPeek, 1)
	t.Logf("ClaimPeek:\n%s", p)
	if strings.Count(p, "INDEX sqlease_jobs_due") < 2 || strings.Contains(p, "SCAN sqlease_jobs\n") || strings.HasSuffix(p, "SCAN sqlease_jobs") {
		t.Fatalf("ClaimPeek does not read both halves from the due index:\n%s", p)
	}
	if !strings.Contains(p, "next_run_at>?") {
		t.Fatalf("ClaimPeek's next due time does not seek past now:\n%s", p)
	}
}
