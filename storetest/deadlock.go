package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// testOwnTxDeadlockVictim: a transaction of the store's own that the server
// rolls back as a deadlock's victim is run again, so the caller (an API
// request) gets its result instead of a retryable error for a conflict it
// did not cause. MariaDB picked a trigger's write-then-read as the victim of
// a finish committing beside it (CI, TestTriggerWhileRunningConflicts).
//
// The deadlock is made for real: another transaction locks the running
// run's row, DeleteJob locks the job's row and waits for the run's, and the
// other transaction then asks for the job's row. The store's side must be
// the victim: InnoDB picks the transaction with the smaller weight (the
// other one first locks the padding rows), PostgreSQL the backend whose
// deadlock_timeout runs out first (DeleteJob waits 300 ms longer, from when
// the server shows it waiting: awaitLockWait), SQL
// Server the session of the lower DEADLOCK_PRIORITY.
func testOwnTxDeadlockVictim(t *testing.T, s *sqlstore.Store) {
	if s.Dialect().RolledBack == nil {
		// SQLite: one writer at a time, so no deadlock to be the victim of.
		t.Logf("%s reports no rolled-back transactions: nothing to run again", s.Dialect().Name)
		return
	}
	ctx := t.Context()
	l, _ := startedRun(t, s, "victim", "w")
	far := dbNow(t, s).Add(time.Hour)
	var pads []sqlstore.StoredJob
	var next []time.Time
	for i := range 40 {
		name := fmt.Sprintf("pad-%02d", i)
		pads = append(pads, sqlstore.StoredJob{Job: sqlease.Job{Name: name, MissedRuns: sqlease.RunOnce,
			Retry: sqlease.Retry{MaxAttempts: 1}, LockTimeout: time.Minute}, SpecHash: name})
		next = append(next, far)
	}
	padded, _, err := s.InsertJobs(ctx, pads, next)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := padded[0].ID, padded[0].ID
	for _, j := range padded {
		lo, hi = min(lo, j.ID), max(hi, j.ID)
	}
	m := insertInto.FindStringSubmatch(s.Dialect().Jobs.InsertRun)
	if m == nil {
		t.Fatalf("storetest: no runs table in InsertRun %q", s.Dialect().Jobs.InsertRun)
	}
	runs := m[1]
	jobs := strings.Replace(runs, "_runs", "_jobs", 1)
	ph := func(n int) string {
		switch s.Dialect().Name {
		case "postgres":
			return fmt.Sprintf("$%d", n)
		case "sqlserver":
			return fmt.Sprintf("@p%d", n)
		}
		return "?"
	}

	other, err := s.DB().BeginTx(ctx, s.Dialect().TxOptions)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback() }()
	exec := func(what, q string, args ...any) {
		t.Helper()
		if _, err := other.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("the other transaction: %s: %v", what, err)
		}
	}
	// The padding is locked by its ids: a scan of a range of names would
	// also lock the next name in the index, the victim's (InnoDB), and
	// the store would then wait for the job, not the run.
	pad := ` FROM ` + jobs + ` WHERE id >= ` + ph(1) + ` AND id <= ` + ph(2)
	if s.Dialect().Name == "mysql" {
		// MariaDB ends a transaction of the pool idle for a second
		// (idleTransactionLimit): this one waits longer between statements.
		exec("idle limit", `SET /*M!100300 SESSION idle_transaction_timeout = 0, */ @sqlease_storetest = NULL`)
	}
	if s.Dialect().Name == "sqlserver" {
		exec("deadlock priority", `SET DEADLOCK_PRIORITY HIGH`)
		exec("lock the padding", `UPDATE `+jobs+` SET name = name`+strings.TrimPrefix(pad, ` FROM `+jobs), lo, hi)
	} else {
		exec("lock the padding", `SELECT id`+pad+` FOR UPDATE`, lo, hi)
	}
	exec("lock the run", `UPDATE `+runs+` SET holder_id = holder_id WHERE job_id = `+ph(1), l.JobID)

	deleted := make(chan error, 1)
	go func() { deleted <- s.DeleteJob(ctx, "victim") }()
	awaitLockWait(t, s, jobs, runs, deleted)
	// The cycle: the store holds the job and waits for the run; this asks
	// for the job. The store's transaction is rolled back and run again,
	// which then waits for this one to end.
	if _, err := other.ExecContext(ctx, `UPDATE `+jobs+` SET name = name WHERE name = `+ph(1), "victim"); err != nil {
		if s.Dialect().RolledBack(err) {
			t.Fatalf("the server picked the other transaction as the deadlock's victim, not the store's (%v): the scenario did not happen", err)
		}
		t.Fatalf("the other transaction: ask for the job: %v", err)
	}
	select {
	case err := <-deleted:
		t.Fatalf("DeleteJob returned (%v) while the other transaction held its job: the deadlock's victim was not run again", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := other.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, deleted, "DeleteJob"); err != nil {
		if errors.Is(err, sqlease.ErrTransient) {
			t.Fatalf("DeleteJob, a deadlock's victim, failed instead of running again: %v", err)
		}
		t.Fatalf("DeleteJob: %v", err)
	}
	if got := runsOf(t, s, l.JobID); len(got) != 1 || got[0].outcome != string(sqlease.OutcomeAbandoned) || !got[0].finished {
		t.Fatalf("runs of the job deleted after the deadlock: %+v, want one abandoned", got)
	}
	if _, err := s.Job(ctx, "victim"); !errors.Is(err, sqlease.ErrNoJob) {
		t.Fatalf("the job after DeleteJob: %v, want ErrNoJob", err)
	}
}

// awaitLockWait returns once the server shows DeleteJob waiting for the
// run's row — in its update of runs (PostgreSQL), in its delete of the job
// (MariaDB: the runs' foreign key) — so that
// the cycle is closed only once it is half made (on a starved machine a
// fixed pause could end before DeleteJob reached the row, and the test
// would pass without a deadlock). Where the server does not show its waits
// to the test's user (SQL Server without VIEW SERVER STATE, MariaDB without
// PROCESS), it pauses 300 ms instead and says so.
func awaitLockWait(t *testing.T, s *sqlstore.Store, jobs, runs string, deleted <-chan error) {
	t.Helper()
	var q string
	switch s.Dialect().Name {
	case "postgres":
		q = `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()
	AND (position($1 in query) > 0 OR position($2 in query) > 0)`
	case "mysql":
		// The DELETE of the job waits (the runs' foreign key). Its own
		// user's sessions are visible to the test's user; InnoDB's lock
		// waits (INNODB_TRX) need the PROCESS privilege.
		q = `SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND INFO LIKE CONCAT('DELETE FROM ', ?, ' %') AND ? <> ''`
	case "sqlserver":
		q = `SELECT count(*) FROM sys.dm_exec_requests r CROSS APPLY sys.dm_exec_sql_text(r.sql_handle) x WHERE r.blocking_session_id <> 0 AND r.session_id <> @@SPID
	AND (CHARINDEX(@p1, x.text) > 0 OR CHARINDEX(@p2, x.text) > 0)`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-deleted:
			t.Fatalf("DeleteJob returned (%v) while another transaction held its job's run", err)
		default:
		}
		var n int
		err := errors.New("no query for this dialect")
		if q != "" {
			err = s.DB().QueryRowContext(t.Context(), q, jobs, runs).Scan(&n)
		}
		if err != nil {
			t.Logf("the server's lock waits are not readable here (%v): pausing 300 ms for DeleteJob to reach the run's row", err)
			select {
			case err := <-deleted:
				t.Fatalf("DeleteJob returned (%v) while another transaction held its job's run", err)
			case <-time.After(300 * time.Millisecond):
			}
			return
		}
		if n > 0 {
			if s.Dialect().Name == "postgres" {
				// PostgreSQL's victim is the waiter whose deadlock_timeout
				// runs out first: DeleteJob's, by this margin.
				select {
				case err := <-deleted:
					t.Fatalf("DeleteJob returned (%v) while another transaction held its job's run", err)
				case <-time.After(300 * time.Millisecond):
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("DeleteJob never waited for the run's row that another transaction holds (not seen waiting in 30 s)")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
