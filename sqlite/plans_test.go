package sqlite_test

import (
	"strings"
	"testing"
)

// TestChangedSeeksBothColumns: the leader's change cursor seeks the index by
// the stamp and the id. With the row value (last_modified_at, id) > (?, ?)
// SQLite sought by the stamp alone and filtered the id, so every page of a
// refresh re-scanned the rows sharing the cursor's stamp: 140 s to read a
// million jobs created with one stamp, now 3.8 s (sqlease-bench -bench
// memory -dialects sqlite).
func TestChangedSeeksBothColumns(t *testing.T) {
	st := newStore(t)
	rows, err := st.DB().QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+st.Dialect().Jobs.Changed,
		"2026-01-01 00:00:00.000", "2026-01-01 00:00:00.000", 1, 1000)
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
	p := strings.Join(plan, "\n")
	if !strings.Contains(p, "last_modified_at=? AND id>?") || strings.Contains(p, "SCAN sqlease_jobs") {
		t.Fatalf("Changed does not seek the cursor's stamp and id:\n%s", p)
	}
}
