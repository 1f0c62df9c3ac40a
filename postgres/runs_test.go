package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/sqlstore"
)

// TestRunFinishIsHOT checks what makes a run's finish cheap: no index of the
// ledger holds a column the finish writes, so the update is HOT (no index
// entry written), which pg_stat_get_xact_tuples_hot_updated counts inside
// the transaction that starts and finishes a run.
func TestRunFinishIsHOT(t *testing.T) {
	ctx := context.Background()
	st, prefix := newStoreWithPrefix(t)
	runs := prefix + "_runs"

	for _, def := range texts(t, st.DB(), `SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = $1::regclass`, runs) {
		for _, col := range []string{"outcome", "error", "finished_at"} {
			if containsWord(def, col) {
				t.Errorf("index %q holds %s, which a finish writes", def, col)
			}
		}
	}

	c := createAndClaim(t, st, sqlease.Job{Name: "hot", LockTimeout: time.Minute}, "w")
	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	run, err := st.StartRun(ctx, tx, c.Lock, c.Name, c.NextRunAt, 1, c.Lock.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.FinishRun(ctx, tx, c.Lock, run, sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}); err != nil {
		t.Fatal(err)
	}
	var updated, hot int64
	if err := tx.QueryRowContext(ctx, `SELECT pg_stat_get_xact_tuples_updated($1::regclass), pg_stat_get_xact_tuples_hot_updated($1::regclass)`, runs).Scan(&updated, &hot); err != nil {
		t.Fatal(err)
	}
	if updated != 1 || hot != 1 {
		t.Fatalf("the run's finish: %d updates, %d of them HOT; want 1 and 1", updated, hot)
	}
}

// TestRunFinishBatchStaysOnPage finishes a claim's batch of runs in one
// statement, as claim mode does: the runs share pages, and the finished
// versions must mostly fit beside them (fillfactor), or the finishes are
// not HOT after all. A version that stays on its page was a HOT update here,
// as TestRunFinishIsHOT checks that no index holds a column a finish writes.
func TestRunFinishBatchStaysOnPage(t *testing.T) {
	ctx := context.Background()
	st, prefix := newStoreWithPrefix(t)
	const n = 300
	jobs := make([]sqlease.Job, n)
	for i := range jobs {
		jobs[i] = sqlease.Job{Name: fmt.Sprintf("batch-%03d", i), LockTimeout: time.Minute}
	}
	createJobs(t, st, jobs...)
	claimed, err := st.ClaimAndStart(ctx, "w", n, sqlstore.ClaimCursor{})
	if err != nil || len(claimed) != n {
		t.Fatalf("claim: %v, %d jobs", err, len(claimed))
	}
	pages := func() map[int64]string {
		rows, err := st.DB().QueryContext(ctx, `SELECT job_id, (ctid::text::point)[0]::bigint FROM `+prefix+`_runs`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		m := map[int64]string{}
		for rows.Next() {
			var id int64
			var page string
			if err := rows.Scan(&id, &page); err != nil {
				t.Fatal(err)
			}
			m[id] = page
		}
		return m
	}
	before := pages()
	reqs := make([]sqlstore.FinishReq, 0, n)
	for _, c := range claimed {
		if c.Started == nil {
			t.Fatalf("job %s was not started by its claim", c.Name)
		}
		reqs = append(reqs, sqlstore.FinishReq{Lock: c.Lock, Run: *c.Started, Finish: sqlstore.Finish{Outcome: sqlease.OutcomeSucceeded}})
	}
	done, err := st.FinishRuns(ctx, nil, reqs)
	if err != nil || !slices.Equal(done, slices.Repeat([]bool{true}, n)) {
		t.Fatalf("FinishRuns: %v %v", done, err)
	}
	after := pages()
	stayed := 0
	for id, p := range before {
		if after[id] == p {
			stayed++
		}
	}
	t.Logf("%d of %d finished runs stayed on their page", stayed, n)
	if stayed < n*8/10 {
		t.Fatalf("only %d of %d finished runs stayed on their page: the finish of a batch is mostly not HOT", stayed, n)
	}
}

// createAndClaim creates a job due now and claims it for holder.
func createAndClaim(t *testing.T, st *sqlstore.Store, j sqlease.Job, holder string) sqlstore.Claimed {
	t.Helper()
	createJobs(t, st, j)
	claimed, err := st.ClaimDue(t.Context(), holder, 1)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v, %d jobs", err, len(claimed))
	}
	return claimed[0]
}

// texts runs a query of one text column on db (a pool or a transaction)
// and returns its values.
func texts(t *testing.T, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, query string, args ...any) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), query, args...)
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

func containsWord(s, w string) bool {
	for i := 0; i+len(w) <= len(s); i++ {
		if s[i:i+len(w)] == w && (i == 0 || !identByte(s[i-1])) && (i+len(w) == len(s) || !identByte(s[i+len(w)])) {
			return true
		}
	}
	return false
}

func identByte(b byte) bool { return b == '_' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' }

// TestRunsSchemaUpgrade migrates a run ledger of the earlier schema (a
// surrogate id as key, a 'running' and a finished_at index, no fillfactor;
// the jobs table had none either): the id goes, the attempt's identity
// becomes the key, the indexes are replaced, both tables leave room for
// updates, the rows stay and the abandon of a crashed run still finds its
// row.
func TestRunsSchemaUpgrade(t *testing.T) {
	ctx := context.Background()
	st, prefix := newStoreWithPrefix(t)
	db := st.DB()
	runs := prefix + "_runs"
	c := createAndClaim(t, st, sqlease.Job{Name: "old", LockTimeout: time.Second}, "crashed")

	// The earlier ledger, with one finished run and the crashed holder's
	// run of the job's due occurrence still marked running.
	for _, q := range []string{
		`DROP TABLE ` + runs,
		`CREATE TABLE ` + runs + ` (
	id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	job_id        bigint       NOT NULL,
	job_name      varchar(128) NOT NULL,
	scheduled_for timestamptz  NOT NULL,
	attempt       integer      NOT NULL,
	holder_id     varchar(128) NOT NULL,
	epoch         bigint       NOT NULL,
	started_at    timestamptz  NOT NULL,
	finished_at   timestamptz,
	outcome       varchar(16)  NOT NULL,
	error         text,
	UNIQUE (job_id, scheduled_for, attempt)
)`,
		`CREATE INDEX ` + runs + `_running ON ` + runs + ` (job_id) WHERE outcome = 'running'`,
		`CREATE INDEX ` + runs + `_finished_at ON ` + runs + ` (finished_at) WHERE finished_at IS NOT NULL`,
		`ALTER TABLE ` + prefix + `_jobs RESET (fillfactor)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO `+runs+` (job_id, job_name, scheduled_for, attempt, holder_id, epoch, started_at, finished_at, outcome)
VALUES ($1, 'old', $2::timestamptz - interval '1 hour', 1, 'h', 1, now(), now(), 'succeeded'),
       ($1, 'old', $2, 1, 'crashed', $3, now(), NULL, 'running')`, c.ID, c.NextRunAt, c.Lock.Epoch); err != nil {
		t.Fatal(err)
	}

	for range 2 { // the second migration finds nothing to do
		s2, err := postgres.OpenStore(ctx, databaseURL(t), prefix)
		if err != nil {
			t.Fatalf("OpenStore on the earlier schema: %v", err)
		}
		s2.DB().Close()
	}

	var hasID bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'id' AND NOT attisdropped)`, runs).Scan(&hasID); err != nil || hasID {
		t.Fatalf("id column after the upgrade: %v %v", hasID, err)
	}
	var pk string
	if err := db.QueryRowContext(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p'`, runs).Scan(&pk); err != nil || pk != "PRIMARY KEY (job_id, scheduled_for, attempt)" {
		t.Fatalf("primary key after the upgrade: %q %v", pk, err)
	}
	for _, table := range []string{runs, prefix + "_jobs"} {
		var opts string
		if err := db.QueryRowContext(ctx, `SELECT coalesce(array_to_string(reloptions, ','), '') FROM pg_class WHERE oid = $1::regclass`, table).Scan(&opts); err != nil || opts != "fillfactor=50" {
			t.Fatalf("%s options after the upgrade: %q %v, want fillfactor=50", table, opts, err)
		}
	}
	idx := texts(t, db, `SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = $1::regclass ORDER BY 1`, runs)
	if want := []string{runs + "_pkey", runs + "_started_at"}; !slices.Equal(idx, want) {
		t.Fatalf("indexes after the upgrade: %v, want %v", idx, want)
	}

	// The crashed run is abandoned when the stale lock is reclaimed.
	if _, err := db.ExecContext(ctx, `UPDATE `+prefix+`_jobs SET locked_at = locked_at - interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	re, err := st.ClaimDue(ctx, "next", 1)
	if err != nil || len(re) != 1 || !re[0].Reclaimed {
		t.Fatalf("reclaim: %v %+v", err, re)
	}
	if _, err := st.StartRun(ctx, nil, re[0].Lock, "old", re[0].NextRunAt, 2, re[0].Lock.Epoch); err != nil {
		t.Fatal(err)
	}
	got, err := st.Runs(ctx, "old", 10)
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []sqlease.Outcome
	for _, r := range got {
		outcomes = append(outcomes, r.Outcome)
	}
	// Newest first: attempt 2 and the abandoned attempt 1 of the due
	// occurrence, then the finished run of the hour before.
	if want := []sqlease.Outcome{sqlease.OutcomeRunning, sqlease.OutcomeAbandoned, sqlease.OutcomeSucceeded}; !slices.Equal(outcomes, want) {
		t.Fatalf("runs after the reclaim: %v, want %v", outcomes, want)
	}
}

// TestPruneRuns deletes the runs that finished before the retention cutoff,
// and only those: not a run still in flight, however old its start.
func TestPruneRuns(t *testing.T) {
	ctx := context.Background()
	st, prefix := newStoreWithPrefix(t)
	runs := prefix + "_runs"
	if _, err := st.DB().ExecContext(ctx, `INSERT INTO `+runs+` (job_id, job_name, scheduled_for, attempt, holder_id, epoch, started_at, finished_at, outcome)
VALUES (1, 'j', now() - interval '3 hours', 1, 'h', 1, now() - interval '3 hours', now() - interval '2 hours', 'succeeded'),
       (1, 'j', now() - interval '2 hours', 1, 'h', 1, now() - interval '2 hours', now() - interval '10 minutes', 'failed'),
       (1, 'j', now() - interval '1 hour', 1, 'h', 1, now() - interval '5 hours', NULL, 'running')`); err != nil {
		t.Fatal(err)
	}
	if n, err := st.PruneRuns(ctx, time.Hour); err != nil || n != 1 {
		t.Fatalf("PruneRuns(1h) = %d, %v; want 1 (the run that finished 2 hours ago)", n, err)
	}
	if n, err := st.PruneRuns(ctx, time.Minute); err != nil || n != 1 {
		t.Fatalf("PruneRuns(1m) = %d, %v; want 1 (the run that finished 10 minutes ago)", n, err)
	}
	var left string
	if err := st.DB().QueryRowContext(ctx, `SELECT string_agg(outcome, ',') FROM `+runs).Scan(&left); err != nil || left != "running" {
		t.Fatalf("runs left: %q %v, want the one in flight", left, err)
	}
}

// TestClaimStartJobs: the leader's claim of named jobs also starts the runs
// of the one-off ones, under the lease epoch, and leaves periodic ones (the
// missed-runs policy decides those in Go) claimed but not started; a job
// another leader epoch claimed is reclaimed and not started either.
func TestClaimStartJobs(t *testing.T) {
	ctx := context.Background()
	st, prefix := newStoreWithPrefix(t)
	ids := createJobs(t, st, sqlease.Job{Name: "once"}, sqlease.Job{Name: "every", Schedule: sqlease.Schedule{Every: time.Hour}}, sqlease.Job{Name: "prior"})
	// "prior" was claimed under lease epoch 3 by another leader.
	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ClaimJobs(ctx, tx, ids[2:], sqlease.Token{Name: "lead", Holder: "old", Epoch: 3}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	tok := sqlease.Token{Name: "lead", Holder: "new", Epoch: 4}
	tx, err = st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	claimed, err := st.ClaimStartJobs(ctx, tx, ids, tok)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("ClaimStartJobs: %d claimed, %v", len(claimed), err)
	}
	byName := map[string]sqlstore.Claimed{}
	for _, c := range claimed {
		byName[c.Name] = c
		if c.Lock.Holder != "new" {
			t.Errorf("%s locked by %q", c.Name, c.Lock.Holder)
		}
	}
	if r := byName["once"].Started; r == nil || r.Epoch != 4 || r.Attempt != 1 || r.Holder != "new" || !r.ScheduledFor.Equal(byName["once"].NextRunAt) {
		t.Errorf("the one-off job's run: %+v", r)
	}
	if r := byName["every"].Started; r != nil {
		t.Errorf("a periodic job was started by the claim: %+v", r)
	}
	if c := byName["prior"]; c.Started != nil || !c.Reclaimed {
		t.Errorf("a job claimed under an earlier epoch: started %+v, reclaimed %v", c.Started, c.Reclaimed)
	}
	var running, epoch int64
	if err := tx.QueryRowContext(ctx, `SELECT count(*), max(epoch) FROM `+prefix+`_runs WHERE outcome = 'running'`).Scan(&running, &epoch); err != nil || running != 1 || epoch != 4 {
		t.Fatalf("runs in the ledger: %d running, epoch %d, %v; want the one-off job's, under epoch 4", running, epoch, err)
	}
}

// TestClaimIsHOT: a claim writes only the lock columns, which no index of
// the jobs table holds, so claiming a batch is HOT updates only (no index
// entry written): with the leader's ClaimStartJobs and claim mode's
// ClaimAndStart, counted inside the claiming transaction (with a claim
// that also stamped last_modified_at, none was).
func TestClaimIsHOT(t *testing.T) {
	ctx := context.Background()
	st, prefix := newStoreWithPrefix(t)
	jobs := prefix + "_jobs"
	for _, def := range texts(t, st.DB(), `SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = $1::regclass`, jobs) {
		for _, col := range []string{"locked_by", "locked_at", "lock_epoch", "lock_lease_epoch"} {
			if containsWord(def, col) {
				t.Errorf("index %q holds %s, which a claim writes", def, col)
			}
		}
	}
	const n = 40
	hotJobs := make([]sqlease.Job, n)
	for i := range hotJobs {
		hotJobs[i] = sqlease.Job{Name: fmt.Sprintf("hot-%02d", i), LockTimeout: time.Minute}
	}
	ids := createJobs(t, st, hotJobs...)
	hot := func(tx *sql.Tx) (updated, hot int64) {
		t.Helper()
		if err := tx.QueryRowContext(ctx, `SELECT pg_stat_get_xact_tuples_updated($1::regclass), pg_stat_get_xact_tuples_hot_updated($1::regclass)`, jobs).Scan(&updated, &hot); err != nil {
			t.Fatal(err)
		}
		return updated, hot
	}
	tok := sqlease.Token{Name: "lead", Holder: "leader", Epoch: 1}
	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	u0, h0 := hot(tx)
	claimed, err := st.ClaimStartJobs(ctx, tx, ids[:n/2], tok)
	if err != nil || len(claimed) != n/2 {
		t.Fatalf("ClaimStartJobs: %d claimed, %v", len(claimed), err)
	}
	// A version that does not fit on its page is not HOT whatever the
	// columns: most must be.
	if u, h := hot(tx); u-u0 != n/2 || h-h0 < (u-u0)*8/10 {
		t.Fatalf("the leader's claim of %d jobs: %d updates, %d of them HOT; want nearly all HOT", n/2, u-u0, h-h0)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	// Claim mode's statement takes no transaction: run it in one here, as
	// the same text, to count.
	tx, err = st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	// The counts are the backend's not yet reported, which may include the
	// transaction above: count the difference.
	u0, h0 = hot(tx)
	var got int
	rows, err := tx.QueryContext(ctx, st.Dialect().Jobs.ClaimStart, "w", n, 0)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		got++
	}
	if err := rows.Err(); err != nil || got != n/2 {
		t.Fatalf("claim mode's claim: %d claimed, %v", got, err)
	}
	rows.Close()
	if u, h := hot(tx); u-u0 != n/2 || h-h0 < (u-u0)*8/10 {
		t.Fatalf("claim mode's claim of %d jobs: %d updates, %d of them HOT; want nearly all HOT", n/2, u-u0, h-h0)
	}
}

// TestClaimCursor: a claim from a cursor takes only the due jobs after it
// in claim order (next_run_at, id), and the zero cursor takes them from the
// start.
func TestClaimCursor(t *testing.T) {
	ctx := t.Context()
	st, _ := newStoreWithPrefix(t)
	base := time.Now().Add(-time.Hour)
	jobs := make([]sqlease.Job, 5)
	for i := range jobs {
		jobs[i] = sqlease.Job{Name: fmt.Sprint("j", i), Schedule: sqlease.Schedule{At: base.Add(time.Duration(i) * time.Second)}}
	}
	createJobs(t, st, jobs...)
	names := func(c []sqlstore.Claimed) string {
		var s []string
		for _, j := range c {
			s = append(s, j.Name)
		}
		slices.Sort(s)
		return strings.Join(s, ",")
	}
	claim := func(limit int, after sqlstore.ClaimCursor) []sqlstore.Claimed {
		t.Helper()
		c, err := st.ClaimAndStart(ctx, "w", limit, after)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := claim(2, sqlstore.ClaimCursor{})
	if got := names(first); got != "j0,j1" {
		t.Fatalf("from the start: %s, want j0,j1", got)
	}
	cur := sqlstore.ClaimCursor{}.Past(first)
	second := claim(2, cur)
	if got := names(second); got != "j2,j3" {
		t.Fatalf("from the cursor after j1: %s, want j2,j3", got)
	}
	cur = cur.Past(second)
	createJobs(t, st, sqlease.Job{Name: "behind", Schedule: sqlease.Schedule{At: base.Add(-time.Hour)}})
	if got := names(claim(10, cur)); got != "j4" {
		t.Fatalf("from the cursor after j3: %s, want j4 (not the job behind it)", got)
	}
	if got := names(claim(10, sqlstore.ClaimCursor{})); got != "behind" {
		t.Fatalf("from the start again: %s, want behind", got)
	}
}
