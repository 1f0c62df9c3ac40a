package schedproc

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/internal/ledger"
	"github.com/sqlease/sqlease/internal/pgtest"
	"github.com/sqlease/sqlease/scheduler"
)

func TestMain(m *testing.M) {
	os.Exit(fleettest.WorkersMain(m, WorkerMain, &timings, ""))
}

const (
	prefix    = "sp"
	leaseName = "schedproc"

	// Leader mode.
	refreshInterval = 200 * time.Millisecond // schedule_refresh_interval

	// Claim mode.
	pollInterval = 100 * time.Millisecond

	slack = 3 * time.Second
)

// The lease of leader mode's workers, and the bound of a crash failover.
var (
	workerLease   = fleettest.FastLease(leaseName)
	failoverBound = workerLease.FailoverBound(slack)
)

// backend is one database shared by the workers of one test.
type backend struct{ *fleettest.Backend }

func (b *backend) leasesTable() string { return prefix + "_leases" }

func (b *backend) claimConfig() WorkerConfig {
	return WorkerConfig{Dialect: b.Dialect, DSN: b.DSN, Prefix: prefix, Mode: ModeClaim,
		PollInterval: pollInterval, BatchSize: 8}
}

// leaderConfig is leader mode as the daemon runs it: on PostgreSQL the
// leader refreshes on the jobs change feed (at most once per refresh
// interval), elsewhere it polls every refresh interval.
func (b *backend) leaderConfig(refresh time.Duration) WorkerConfig {
	return WorkerConfig{Dialect: b.Dialect, DSN: b.DSN, Prefix: prefix, Mode: ModeLeader,
		Lease: workerLease, RefreshInterval: refresh, ListenJobs: b.Dialect == "postgres"}
}

func newBackend(t *testing.T, dialect, dsn string) *backend {
	t.Helper()
	b := &backend{fleettest.NewBackend(t, dialect, dsn, prefix)}
	if err := MigrateExecs(context.Background(), b.DB, dialect, prefix); err != nil {
		t.Fatal(err)
	}
	return b
}

// admin is the test's own scheduler on the database (no dispatch).
func (b *backend) admin(t *testing.T) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(scheduler.Config{Store: b.Store, Holder: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (b *backend) now(t *testing.T) time.Time {
	t.Helper()
	n, err := b.Store.Now(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

type scenario struct {
	name string
	run  func(t *testing.T, b *backend)
}

var scenarios = []scenario{
	{name: "claim_race_exactly_once", run: testClaimRace},
	{name: "claim_sigkill_in_handler_reclaimed", run: testClaimKillInHandler},
	{name: "leader_failover_sigkill_then_sigstop", run: testLeaderFailover},
	{name: "leader_runs_job_created_by_follower", run: testLeaderRunsFollowerJob},
	{name: "drain_while_dispatching", run: testDrainWhileDispatching},
	{name: "start_run_failure_loses_occurrence", run: testStartRunFailure},
}

// TestSQLite and TestPostgres run in parallel: each scenario has a database
// of its own, and most of their time is spent waiting on leases.
func TestSQLite(t *testing.T) {
	t.Parallel()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			sc.run(t, newBackend(t, "sqlite", filepath.Join(t.TempDir(), "sched.db")))
		})
	}
}

func TestPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server")
	}
	t.Parallel()
	shared := pgtest.Shared(t)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			sc.run(t, newBackend(t, "postgres", pgtest.CreateDatabase(t, shared())))
		})
	}
}

// --- helpers ---

func isExec(job string) func(Event) bool {
	return func(e Event) bool { return e.Ev == EvExec && e.Job == job }
}

func parseSF(t *testing.T, sf string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, sf)
	if err != nil {
		t.Fatalf("bad scheduled_for %q: %v", sf, err)
	}
	return v
}

// collect stops nothing: call it after the workers have exited. It fails
// the test on every violation Collect finds.
func collect(t *testing.T, f *Fleet, b *backend) *Analysis {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := Collect(ctx, b.DB, b.Store, prefix, f.Events())
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range a.Violations {
		if i == 50 {
			t.Errorf("… and %d more violations", len(a.Violations)-50)
			break
		}
		t.Errorf("violation: %s", v)
	}
	return a
}

// checkSeries checks that the occurrences of an every-job form one
// contiguous series from its first occurrence, step every, each completed
// by exactly one succeeded run, up to the job's final next_run_at (the
// occurrence in flight at shutdown, if any, may be left unfinished), and
// returns it.
func checkSeries(t *testing.T, a *Analysis, name string, first time.Time, every time.Duration) []*OccInfo {
	t.Helper()
	occs := a.Of(name)
	job, ok := a.Jobs[name]
	if !ok {
		t.Fatalf("job %s missing", name)
	}
	if len(occs) == 0 {
		t.Errorf("%s: no occurrence ran", name)
		return nil
	}
	want := first
	for i, o := range occs {
		if sf := parseSF(t, o.Occ.SF); !sf.Equal(want) {
			t.Errorf("%s: occurrence %d is %s, want %s (gap or stray occurrence)", name, i, o.Occ.SF, FormatSF(want))
			return occs
		}
		want = want.Add(every)
		last := i == len(occs)-1
		if _, ok := o.Succeeded(); !ok && !(last && job.NextRunAt.Equal(parseSF(t, o.Occ.SF))) {
			t.Errorf("%s: occurrence %s did not succeed: runs %+v", name, o.Occ, o.Runs)
		}
	}
	lastOcc := occs[len(occs)-1]
	if _, ok := lastOcc.Succeeded(); ok && !job.NextRunAt.Equal(want) {
		t.Errorf("%s: next_run_at %s after the last occurrence %s, want %s", name, FormatSF(job.NextRunAt), lastOcc.Occ.SF, FormatSF(want))
	}
	return occs
}

// --- 1. claim mode: racing workers ---

// Five claim-mode workers race over 300 one-off jobs due over three seconds
// and three every-200ms run_all jobs, each handler recording its execution
// in a table without a unique key. Afterwards (Collect): no attempt executed
// twice, no occurrence re-executed unless its earlier attempt is recorded
// failed or abandoned (a loaded database can fail a write or delay a
// heartbeat past lock_timeout), every succeeded run matched by exactly one
// recorded execution; and every one-off completed once at its time, every
// every-job occurrence from its first on completed once with no gap.
func testClaimRace(t *testing.T, b *backend) {
	ctx := context.Background()
	admin := b.admin(t)
	const (
		oneOffs   = 300
		spread    = 15 * time.Millisecond
		everyJobs = 3
		every     = 200 * time.Millisecond
	)
	// Workaround for a known bug (see the start_run_failure_loses_occurrence
	// scenario): a StartRun that fails — on SQLite, "database is locked"
	// after the 5 s busy timeout when the machine is loaded — leaves the job
	// locked until lock_timeout and counts an attempt; once max_attempts
	// such claims have leaked, the occurrence is dropped without ever
	// running. A short lock_timeout bounds the delay, a high max_attempts
	// keeps the occurrence; leaked claims are logged as KNOWN BUG below.
	const (
		lockTimeout = 5 * time.Second
		maxAttempts = 100
	)
	retry := sqlease.Retry{MaxAttempts: maxAttempts}
	t0 := b.now(t).Add(2 * time.Second)
	for i := range oneOffs {
		at := t0.Add(time.Duration(i) * spread)
		if _, _, err := admin.Create(ctx, sqlease.Job{Name: fmt.Sprintf("once-%03d", i), Schedule: sqlease.Schedule{At: at}, LockTimeout: lockTimeout, Retry: retry}); err != nil {
			t.Fatal(err)
		}
	}
	firstOf := map[string]time.Time{}
	for i := range everyJobs {
		name := fmt.Sprintf("every-%d", i)
		j, _, err := admin.Create(ctx, sqlease.Job{Name: name, Schedule: sqlease.Schedule{Every: every}, MissedRuns: sqlease.RunAll, LockTimeout: lockTimeout, Retry: retry})
		if err != nil {
			t.Fatal(err)
		}
		firstOf[name] = j.NextRunAt
	}
	lastAt := t0.Add((oneOffs - 1) * spread)

	f := NewFleet(t, b.claimConfig())
	f.Start(5, func(c *WorkerConfig) { c.ExecJitter = 5 * time.Millisecond })
	executed := map[string]bool{}
	if _, ok := f.TryWait(0, 60*time.Second, func(e Event) bool {
		if e.Ev == EvExecDone && strings.HasPrefix(e.Job, "once-") {
			executed[e.Job] = true
		}
		return len(executed) >= oneOffs
	}); !ok {
		for i := range oneOffs {
			name := fmt.Sprintf("once-%03d", i)
			if executed[name] {
				continue
			}
			j, err := admin.Job(ctx, name)
			runs, _ := admin.Runs(ctx, name, 10)
			t.Errorf("%s not executed: %+v %v; runs %+v", name, j, err, runs)
		}
		t.Fatalf("timed out waiting for all one-off jobs executed")
	}
	// Let the every-jobs run past the last one-off, until each has caught up
	// with its backlog (run_all: every occurrence since creation runs).
	for i := range everyJobs {
		name := fmt.Sprintf("every-%d", i)
		f.Wait(0, 40*time.Second, name+" caught up", func(e Event) bool {
			if e.Ev != EvExecDone || e.Job != name {
				return false
			}
			sf := parseSF(t, e.SF)
			return sf.After(lastAt) && e.T.Sub(sf) < time.Second
		})
	}
	stopDB := b.now(t)
	f.Shutdown(20 * time.Second)
	f.CheckWorkers()
	a := collect(t, f, b)

	perHolder := map[string]int{}
	for _, x := range a.Execs {
		perHolder[x.Holder]++
	}
	for name, j := range a.Jobs {
		occs := a.Of(name)
		if strings.HasPrefix(name, "once-") {
			if len(occs) != 1 {
				t.Errorf("%s: %d occurrences, want 1: %+v", name, len(occs), occs)
				continue
			}
			if d := parseSF(t, occs[0].Occ.SF).Sub(j.Schedule.At); d > time.Millisecond || d < -time.Millisecond {
				t.Errorf("%s: ran occurrence %s, scheduled at %s", name, occs[0].Occ.SF, FormatSF(j.Schedule.At))
			}
			if _, ok := occs[0].Succeeded(); !ok || !j.NextRunAt.IsZero() {
				t.Errorf("%s: not completed: next_run_at %s, runs %+v", name, FormatSF(j.NextRunAt), occs[0].Runs)
			}
			continue
		}
		occs = checkSeries(t, a, name, firstOf[name], every)
		lag := stopDB.Sub(j.NextRunAt)
		t.Logf("%s: %d occurrences, contiguous from %s; next_run_at %v behind the clock at shutdown", name, len(occs), FormatSF(firstOf[name]), lag.Round(time.Millisecond))
	}
	// No fault is injected, but a loaded database may fail a write (SQLite:
	// "database is locked" after the busy timeout): such an attempt is
	// recorded failed and retried — Collect has checked that a re-execution
	// only follows a failed or abandoned attempt. Show them.
	runs, retried, leaked := 0, 0, 0
	for _, o := range a.Occ {
		runs += len(o.Runs)
		if len(o.Execs) > 1 || len(o.Runs) > 1 {
			retried++
			t.Logf("%s retried: %d executions, runs %+v", o.Occ, len(o.Execs), o.Runs)
		}
		if len(o.Runs) > 0 && o.Runs[0].Attempt > 1 {
			leaked++
			t.Logf("KNOWN BUG: %s was claimed but its run never started (first recorded attempt is %d): its lock leaked until lock_timeout", o.Occ, o.Runs[0].Attempt)
		}
	}
	if len(a.Rows) > len(a.Execs) || runs < len(a.Occ) {
		t.Errorf("%d exec events, %d execs rows, %d runs, %d occurrences", len(a.Execs), len(a.Rows), runs, len(a.Occ))
	}
	if len(perHolder) < 2 {
		t.Errorf("only %d worker(s) executed anything: the claims did not race", len(perHolder))
	}
	t.Logf("%d occurrences retried after a failed attempt, %d delayed by a leaked claim", retried, leaked)
	t.Logf("%d executions (%d occurrences of %d jobs) by worker: %v", len(a.Execs), len(a.Occ), len(a.Jobs), perHolder)
}

// --- 2. claim mode: SIGKILL inside a long handler ---

// A worker is SIGKILLed inside the 30 s handler of job "slow" (lock_timeout
// 1 s). Another worker reclaims the stale lock — not before locked_at +
// lock_timeout in database time — and runs the same occurrence as attempt 2
// with the same idempotency key; the dead worker's run is abandoned.
func testClaimKillInHandler(t *testing.T, b *backend) {
	ctx := context.Background()
	admin := b.admin(t)
	const lockTimeout = time.Second
	if _, _, err := admin.Create(ctx, sqlease.Job{Name: "slow", LockTimeout: lockTimeout}); err != nil {
		t.Fatal(err)
	}
	f := NewFleet(t, b.claimConfig())
	f.Start(3, func(c *WorkerConfig) { c.SlowJob, c.SlowFor = "slow", 30*time.Second })
	sleeping := f.Wait(0, 20*time.Second, "the slow job's first attempt", func(e Event) bool {
		return e.Ev == EvSleeping && e.Job == "slow"
	})
	// Inside the handler for a few heartbeats (every lock_timeout/4).
	time.Sleep(lockTimeout/2 + rand.N(lockTimeout/4))
	victim := f.Proc(sleeping.Holder)
	mark := f.Mark()
	victim.KillWait(5 * time.Second)
	killedAt := victim.KilledAt()
	// The dead worker's last heartbeat (a heartbeat it sent just before dying
	// could still land later: that only moves locked_at later).
	j, err := admin.Job(ctx, "slow")
	if err != nil {
		t.Fatal(err)
	}
	if j.LockedBy != victim.Holder || j.Attempt != 1 {
		t.Fatalf("job right after the kill: locked by %q attempt %d; want %s attempt 1", j.LockedBy, j.Attempt, victim.Holder)
	}
	lockedAt := j.LockedAt
	re := f.Wait(mark, lockTimeout+slack, "another worker re-executing the occurrence", isExec("slow"))
	reclaim := re.T.Sub(killedAt)
	t.Logf("%s killed in the handler of slow@%s#1; %s re-executed it as attempt %d %v later (lock_timeout %v, heartbeat every %v)",
		victim.Holder, sleeping.SF, re.Holder, re.Attempt, reclaim.Round(time.Millisecond), lockTimeout, lockTimeout/4)
	recordTiming(b.Dialect, "claim reclaim after SIGKILL", reclaim)
	if re.Attempt != 2 || re.SF != sleeping.SF || re.Key != sleeping.Key || re.Holder == victim.Holder {
		t.Errorf("re-execution %v: want attempt 2 of %s with key %s by another worker", re, sleeping.SF, sleeping.Key)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		runs, err := admin.Runs(ctx, "slow", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) == 2 && runs[0].Outcome == sqlease.OutcomeSucceeded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("attempt 2 not recorded succeeded: %+v", runs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.Shutdown(20 * time.Second)
	f.CheckWorkers()
	a := collect(t, f, b)

	occs := a.Of("slow")
	if len(occs) != 1 {
		t.Fatalf("slow: %d occurrences, want 1", len(occs))
	}
	o := occs[0]
	if len(o.Runs) != 2 || len(o.Execs) != 2 || len(o.Rows) != 2 {
		t.Fatalf("slow: %d runs, %d exec events, %d execs rows; want 2 each: %+v", len(o.Runs), len(o.Execs), len(o.Rows), o)
	}
	r1, r2 := o.Runs[0], o.Runs[1]
	if r1.Attempt != 1 || r1.Holder != victim.Holder || r1.Outcome != sqlease.OutcomeAbandoned {
		t.Errorf("the dead worker's run: %+v; want attempt 1 by %s abandoned", r1, victim.Holder)
	}
	if r2.Attempt != 2 || r2.Holder != re.Holder || r2.Outcome != sqlease.OutcomeSucceeded || r2.Epoch <= r1.Epoch {
		t.Errorf("the reclaiming run: %+v; want attempt 2 by %s succeeded under a lock epoch above %d", r2, re.Holder, r1.Epoch)
	}
	if o.Execs[0].Key != o.Execs[1].Key {
		t.Errorf("idempotency keys differ: %q, %q", o.Execs[0].Key, o.Execs[1].Key)
	}
	if stale := lockedAt.Add(lockTimeout); r2.StartedAt.Before(stale) {
		t.Errorf("attempt 2 started at %s, before the dead worker's lock went stale at %s (locked_at %s + %v)",
			FormatSF(r2.StartedAt), FormatSF(stale), FormatSF(lockedAt), lockTimeout)
	} else {
		t.Logf("attempt 2 started %v after the dead worker's last heartbeat (database time)", r2.StartedAt.Sub(lockedAt).Round(time.Millisecond))
	}
	if reclaim > lockTimeout+slack {
		t.Errorf("reclaim took %v, want within lock_timeout %v + %v", reclaim, lockTimeout, slack)
	}
}

// --- 3. leader mode: failover ---

// leaderTerms returns, per holder, the epochs it reported on
// started_leading, and fails the test if two holders started one epoch.
func leaderTerms(t *testing.T, events []Event) (map[string][]int64, map[int64]Event) {
	t.Helper()
	byHolder := map[string][]int64{}
	byEpoch := map[int64]Event{}
	for _, e := range events {
		if e.Ev != EvStartedLeading {
			continue
		}
		if prev, ok := byEpoch[e.Epoch]; ok {
			t.Errorf("epoch %d started by %s and by %s", e.Epoch, prev.Holder, e.Holder)
		}
		byEpoch[e.Epoch] = e
		byHolder[e.Holder] = append(byHolder[e.Holder], e.Epoch)
	}
	return byHolder, byEpoch
}

// checkLeaderEpochs checks every execution of a leader-mode run: its epoch
// is one its worker reported on started_leading, and no execution passed
// Ensure under an epoch after an execution of a higher epoch had (worker
// wall clocks of one host).
func checkLeaderEpochs(t *testing.T, a *Analysis, events []Event) {
	t.Helper()
	byHolder, _ := leaderTerms(t, events)
	for _, x := range a.Execs {
		if !slices.Contains(byHolder[x.Holder], x.Epoch) {
			t.Errorf("execution under epoch %d by %s, which started leading only epochs %v: %v", x.Epoch, x.Holder, byHolder[x.Holder], x)
		}
	}
	execs := slices.Clone(a.Execs)
	sort.SliceStable(execs, func(i, j int) bool { return execs[i].Gate.Before(execs[j].Gate) })
	var top Exec
	for _, x := range execs {
		if x.Epoch < top.Epoch {
			t.Errorf("STALE: execution under epoch %d at %s after epoch %d executed at %s: %v",
				x.Epoch, x.Gate.Format("15:04:05.000000"), top.Epoch, top.Gate.Format("15:04:05.000000"), x)
		}
		if x.Epoch > top.Epoch {
			top = x
		}
	}
}

// Three leader-mode processes (elector + Scheduler.Lead) run an every-100ms
// run_all job. The leader is SIGKILLed at a random point; while nobody
// leads, a one-off job is created. The next leader runs the one-off and
// every tick that fell due in the gap, and catches up with the present.
// Then the current leader stops itself (SIGSTOP, inside a tick's handler
// before Ensure, right after a renew, so it holds no database lock) for
// 2×lease_duration; the third process takes over and re-runs that tick as
// the next attempt; on SIGCONT the paused leader's handler is refused by
// Ensure and it never executes under its old epoch again. Afterwards the
// tick series is contiguous and completed once per occurrence
// (re-executions only after an abandoned attempt), every execution carries
// a lease epoch its process reported on started_leading, no execution
// passed Ensure under an epoch after a higher epoch had, and the fenced
// execution records pass ledger.Check. Liveness waits tolerate a spurious
// lease loss on an overloaded machine; the safety checks do not.
func testLeaderFailover(t *testing.T, b *backend) {
	ctx := context.Background()
	admin := b.admin(t)
	const every = 100 * time.Millisecond
	tick, _, err := admin.Create(ctx, sqlease.Job{Name: "tick", Schedule: sqlease.Schedule{Every: every}, MissedRuns: sqlease.RunAll})
	if err != nil {
		t.Fatal(err)
	}
	f := NewFleet(t, b.leaderConfig(refreshInterval))
	f.Start(3, nil)
	l1 := f.Wait(0, 20*time.Second, "a leader", func(e Event) bool { return e.Ev == EvStartedLeading })
	f.WaitCount(l1.Index, 5, 10*time.Second, "the leader's first ticks", func(e Event) bool {
		return isExec("tick")(e) && e.Holder == l1.Holder
	})
	caughtUp(t, f, l1.Index, l1.Epoch)

	// 1. SIGKILL the leader at a random point of its schedule.
	time.Sleep(rand.N(workerLease.RenewInterval))
	victim := f.Proc(l1.Holder)
	mark := f.Mark()
	victim.KillWait(5 * time.Second)
	killedAt := victim.KilledAt()
	gapJob, _, err := admin.Create(ctx, sqlease.Job{Name: "created-in-gap"})
	if err != nil {
		t.Fatal(err)
	}
	l2 := f.Wait(mark, failoverBound, "a new leader after SIGKILL", func(e Event) bool {
		return e.Ev == EvStartedLeading && e.Epoch > l1.Epoch
	})
	first2 := f.Wait(l2.Index, 5*time.Second, "the new leader's first tick", func(e Event) bool {
		return isExec("tick")(e) && e.Epoch >= l2.Epoch
	})
	gapExec := f.Wait(l2.Index, refreshInterval+slack, "the one-off created in the gap", isExec("created-in-gap"))
	lease2, err := b.Store.Lease(ctx, leaseName)
	if err != nil {
		t.Fatal(err)
	}
	if lease2.Epoch == l2.Epoch && !gapJob.CreatedAt.Before(lease2.AcquiredAt) {
		t.Errorf("the one-off was created at %s, not before epoch %d was acquired at %s", FormatSF(gapJob.CreatedAt), l2.Epoch, FormatSF(lease2.AcquiredAt))
	}
	failover := first2.T.Sub(killedAt)
	recordTiming(b.Dialect, "leader failover after SIGKILL (kill to first tick)", failover)
	t.Logf("killed %s@%d; %s@%d started leading %v later, first tick (%s#%d) after %v, the gap's one-off after %v",
		l1.Holder, l1.Epoch, l2.Holder, l2.Epoch, l2.T.Sub(killedAt).Round(time.Millisecond), first2.SF, first2.Attempt,
		failover.Round(time.Millisecond), gapExec.T.Sub(killedAt).Round(time.Millisecond))
	if failover > failoverBound {
		t.Errorf("failover took %v, bound %v", failover, failoverBound)
	}
	caughtUp(t, f, l2.Index, l2.Epoch)

	// 2. SIGSTOP the current leader inside a tick's handler, past its lease.
	// (On an overloaded machine a renewal may miss its deadline and the
	// lease move on its own: then pause whoever leads now.)
	pausing := pauseLeader(t, f)
	paused := f.Proc(pausing.Holder)
	paused.WaitStopped(2 * time.Second)
	l3 := f.Wait(pausing.Index, failoverBound, "a new leader while the old one is stopped", func(e Event) bool {
		return e.Ev == EvStartedLeading && e.Epoch > pausing.Epoch
	})
	first3 := f.Wait(l3.Index, 5*time.Second, "the next leader's first tick", func(e Event) bool {
		return isExec("tick")(e) && e.Epoch >= l3.Epoch
	})
	recordTiming(b.Dialect, "leader failover after SIGSTOP (stop to first tick)", first3.T.Sub(pausing.T))
	t.Logf("%s@%d stopped in the handler of tick@%s#%d; %s@%d started leading %v later, first tick %s#%d after %v",
		pausing.Holder, pausing.Epoch, pausing.SF, pausing.Attempt, l3.Holder, l3.Epoch, l3.T.Sub(pausing.T).Round(time.Millisecond),
		first3.SF, first3.Attempt, first3.T.Sub(pausing.T).Round(time.Millisecond))
	if d := time.Until(pausing.T.Add(2 * workerLease.LeaseDuration)); d > 0 {
		time.Sleep(d)
	}
	cont := f.Mark()
	contAt := time.Now()
	paused.Cont()
	f.Wait(cont, 5*time.Second, pausing.Holder+" resumed", func(e Event) bool { return e.Ev == EvResumed && e.Holder == pausing.Holder })
	refused := f.Wait(cont, 5*time.Second, pausing.Holder+"'s paused handler refused by Ensure", func(e Event) bool {
		return e.Ev == EvExecRefused && e.Holder == pausing.Holder
	})
	if refused.Occ() != pausing.Occ() || refused.Attempt != pausing.Attempt {
		t.Errorf("refused %v, want the paused run %v", refused, pausing)
	}
	f.Wait(cont, 5*time.Second, pausing.Holder+" stopped_leading", func(e Event) bool {
		return e.Ev == EvStoppedLeading && e.Holder == pausing.Holder && e.Epoch == pausing.Epoch
	})
	f.Wait(cont, 15*time.Second, "a tick scheduled after SIGCONT run on time", func(e Event) bool {
		return isExec("tick")(e) && parseSF(t, e.SF).After(contAt) && e.T.Sub(parseSF(t, e.SF)) < maxTickLag
	})
	f.Shutdown(20 * time.Second)
	f.CheckWorkers()

	// After its stop the old leader may neither pass Ensure nor write a
	// record. A record it began before the stop may end after it, refused
	// (exec_done with an error): that wrote nothing.
	for _, e := range f.Select(pausing.Index+1, func(e Event) bool { return e.Holder == pausing.Holder && e.Epoch == pausing.Epoch }) {
		if e.Ev == EvExec || (e.Ev == EvExecDone && e.Err == "") {
			t.Errorf("the paused leader executed under its old epoch after it was stopped: %v", e)
		}
	}
	if err := ledger.Check(ctx, b.DB, b.Dialect, b.leasesTable()); err != nil {
		t.Errorf("ledger (fenced execution records): %v", err)
	}
	a := collect(t, f, b)
	events := f.Events()
	checkLeaderEpochs(t, a, events)
	occs := checkSeries(t, a, "tick", tick.NextRunAt, every)

	// The ticks that fell due while nobody led were run by a later leader.
	inGap := 0
	for _, o := range occs {
		sf := parseSF(t, o.Occ.SF)
		if sf.After(killedAt) && sf.Before(l2.T) {
			inGap++
			if r, ok := o.Succeeded(); !ok || r.Epoch < l2.Epoch {
				t.Errorf("tick %s fell due during the failover gap; want it run by a later leader (epoch ≥ %d): %+v", o.Occ, l2.Epoch, o.Runs)
			}
		}
	}
	if inGap < 3 {
		t.Errorf("only %d ticks fell due between the kill and the next leader", inGap)
	}
	// The paused run: abandoned, re-run by a later leader as a later attempt
	// with the same idempotency key.
	po := a.Occ[pausing.Occ()]
	if po == nil {
		t.Fatalf("no record of the paused occurrence %v", pausing.Occ())
	}
	if r, ok := po.Run(pausing.Attempt); !ok || r.Outcome != sqlease.OutcomeAbandoned || r.Epoch != pausing.Epoch {
		t.Errorf("the paused run (attempt %d): %+v; want abandoned under epoch %d", pausing.Attempt, po.Runs, pausing.Epoch)
	}
	if r, ok := po.Succeeded(); !ok || r.Epoch <= pausing.Epoch || r.Attempt <= pausing.Attempt {
		t.Errorf("the paused occurrence's retry: %+v; want a later attempt than %d succeeded under an epoch above %d", po.Runs, pausing.Attempt, pausing.Epoch)
	}
	// The one-off created in the gap: completed once, by a later leader.
	gap := a.Of("created-in-gap")
	if len(gap) != 1 {
		t.Errorf("created-in-gap: %d occurrences, want 1", len(gap))
	} else if r, ok := gap[0].Succeeded(); !ok || r.Epoch < l2.Epoch {
		t.Errorf("created-in-gap: runs %+v; want succeeded under an epoch ≥ %d", gap[0].Runs, l2.Epoch)
	}
	reexec := 0
	for _, o := range occs {
		if len(o.Execs) > 1 {
			reexec++
			t.Logf("tick %s executed %d times (explained retries): runs %+v", o.Occ, len(o.Execs), o.Runs)
		}
	}
	_, terms := leaderTerms(t, events)
	t.Logf("tick: %d occurrences contiguous from %s, %d in the failover gap, %d re-executed after an abandoned attempt; %d terms; %d executions by epoch: %v",
		len(occs), FormatSF(tick.NextRunAt), inGap, reexec, len(terms), len(a.Execs), execsByEpoch(a))
}

// currentLeader returns the started_leading event of the latest term that
// has not stopped, from the event log.
func currentLeader(f *Fleet) (Event, bool) {
	var cur Event
	ok := false
	for _, e := range f.Events() {
		switch {
		case e.Ev == EvStartedLeading && e.Epoch > cur.Epoch:
			cur, ok = e, true
		case e.Ev == EvStoppedLeading && ok && e.Epoch == cur.Epoch:
			ok = false
		}
	}
	return cur, ok
}

// pauseLeader makes the current leader SIGSTOP itself inside a tick's
// handler and returns its pausing event. If leadership moves before it
// pauses, it disarms that worker and tries the next leader.
func pauseLeader(t *testing.T, f *Fleet) Event {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		lead, ok := currentLeader(f)
		if !ok {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		p := f.Proc(lead.Holder)
		mark := f.Mark()
		p.Send(CmdPause)
		e, ok := f.TryWait(mark, 3*time.Second, func(e Event) bool { return e.Ev == EvPausing && e.Holder == lead.Holder })
		if ok {
			return e // e.Epoch: the run's, i.e. the lease epoch of the term it runs in
		}
		p.Send(CmdUnpause)
		t.Logf("%s@%d did not pause (leadership moved?); trying the next leader", lead.Holder, lead.Epoch)
	}
	t.Fatal("no leader paused in a handler")
	return Event{}
}

// caughtUp waits (from event position from) until a leader of term epoch
// or later runs a tick less than maxTickLag after its scheduled time: the
// schedule has caught up with the present (worker wall clock against
// database time: one host).
func caughtUp(t *testing.T, f *Fleet, from int, epoch int64) Event {
	t.Helper()
	start := f.Events()[from]
	e := f.Wait(from, 15*time.Second, fmt.Sprintf("a leader of epoch ≥ %d catching up with the tick schedule", epoch), func(e Event) bool {
		return isExec("tick")(e) && e.Epoch >= epoch && e.T.Sub(parseSF(t, e.SF)) < maxTickLag
	})
	t.Logf("%s@%d caught up %v after %s@%d started leading", e.Holder, e.Epoch, e.T.Sub(start.T).Round(time.Millisecond), start.Holder, start.Epoch)
	return e
}

const maxTickLag = 300 * time.Millisecond

func execsByEpoch(a *Analysis) map[int64]int {
	m := map[int64]int{}
	for _, x := range a.Execs {
		m[x.Epoch]++
	}
	return m
}

// --- 4. leader mode: a job created on a follower ---

// Jobs created by follower processes (Scheduler.Create in the follower) and
// by the test's own scheduler are executed once by the leader, under its
// epoch, within the refresh interval plus slack.
func testLeaderRunsFollowerJob(t *testing.T, b *backend) {
	ctx := context.Background()
	admin := b.admin(t)
	f := NewFleet(t, b.leaderConfig(refreshInterval))
	procs := f.Start(3, nil)
	lead := f.Wait(0, 20*time.Second, "a leader", func(e Event) bool { return e.Ev == EvStartedLeading })
	var followers []*Proc
	for _, p := range procs {
		if p.Holder != lead.Holder {
			followers = append(followers, p)
		}
	}
	bound := refreshInterval + slack
	var lat []time.Duration
	for i := range 4 {
		name := fmt.Sprintf("from-follower-%d", i)
		p := followers[i%len(followers)]
		spec, _ := json.Marshal(sqlease.Job{Name: name})
		time.Sleep(rand.N(refreshInterval)) // at a random point of the refresh cycle
		mark := f.Mark()
		p.Send(CmdCreate + " " + string(spec))
		created := f.Wait(mark, 10*time.Second, name+" created", func(e Event) bool { return e.Ev == EvCreated && e.Job == name })
		if created.Err != "" {
			t.Fatalf("create on %s: %s", p.Holder, created.Err)
		}
		ex := f.Wait(mark, bound, "the leader executing "+name, isExec(name))
		lat = append(lat, ex.T.Sub(created.T))
		if ex.Holder != lead.Holder || ex.Epoch != lead.Epoch {
			// Only a spurious loss of the lease (an overloaded machine) may
			// move execution: checkLeaderEpochs below checks it ran under a
			// term its process had started.
			t.Logf("%s created on %s executed by %s@%d, not the first leader %s@%d", name, p.Holder, ex.Holder, ex.Epoch, lead.Holder, lead.Epoch)
		}
	}
	mark := f.Mark()
	if _, _, err := admin.Create(ctx, sqlease.Job{Name: "from-test"}); err != nil {
		t.Fatal(err)
	}
	createdAt := time.Now()
	ex := f.Wait(mark, bound, "the leader executing from-test", isExec("from-test"))
	lat = append(lat, ex.T.Sub(createdAt))
	for _, d := range lat {
		recordTiming(b.Dialect, "leader pick-up of a job created elsewhere", d)
	}
	t.Logf("creation to execution by the leader: %v (refresh interval %v)", roundAll(lat), refreshInterval)
	waitSucceeded(t, admin, 10*time.Second, "from-test", "from-follower-0", "from-follower-1", "from-follower-2", "from-follower-3")
	f.Shutdown(20 * time.Second)
	f.CheckWorkers()
	a := collect(t, f, b)
	checkLeaderEpochs(t, a, f.Events())
	for name := range a.Jobs {
		occs := a.Of(name)
		if len(occs) != 1 {
			t.Errorf("%s: %+v; want one occurrence", name, occs)
			continue
		}
		if _, ok := occs[0].Succeeded(); !ok {
			t.Errorf("%s: runs %+v; want succeeded", name, occs[0].Runs)
		}
	}
	if len(a.Jobs) != 5 {
		t.Errorf("%d jobs, want 5", len(a.Jobs))
	}
}

// waitSucceeded waits until each job has a succeeded run.
func waitSucceeded(t *testing.T, s *scheduler.Scheduler, timeout time.Duration, names ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, name := range names {
		for {
			runs, err := s.Runs(context.Background(), name, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(runs) > 0 && runs[0].Outcome == sqlease.OutcomeSucceeded {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no succeeded run after %v: %+v", name, timeout, runs)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// --- 5. graceful shutdown with Drain under load ---

// Workers shut down the way the daemon does — Scheduler.Drain, then stop the
// dispatcher — while they dispatch an every-100ms job: a leader-mode worker,
// five times, then three claim-mode workers at once. Drain must be free of
// data races (the workers run with the race detector) and leave no run
// behind as "running".
func testDrainWhileDispatching(t *testing.T, b *backend) {
	ctx := context.Background()
	admin := b.admin(t)
	for _, name := range []string{"busy-leader", "busy-claim"} {
		if _, _, err := admin.Create(ctx, sqlease.Job{Name: name, Schedule: sqlease.Schedule{Every: 100 * time.Millisecond}, MissedRuns: sqlease.RunAll}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.Pause(ctx, "busy-claim"); err != nil {
		t.Fatal(err)
	}
	f := NewFleet(t, b.leaderConfig(refreshInterval))
	for range 5 {
		p := f.Launch(func(c *WorkerConfig) { c.Drain = true })
		mark := f.Mark()
		f.Wait(mark, 30*time.Second, p.Holder+" ready", func(e Event) bool { return e.Proc == p.Idx && e.Ev == EvReady })
		p.Send(CmdGo)
		f.WaitCount(mark, 5, 20*time.Second, p.Holder+" running busy-leader", func(e Event) bool { return isExec("busy-leader")(e) && e.Holder == p.Holder })
		time.Sleep(rand.N(50 * time.Millisecond))
		f.Shutdown(20*time.Second, p)
	}
	// Claim mode, on a job of its own (a leader's run cancelled at shutdown
	// may leave its job locked until lock_timeout for claim workers).
	if _, err := admin.Pause(ctx, "busy-leader"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Resume(ctx, "busy-claim"); err != nil {
		t.Fatal(err)
	}
	claim := NewFleet(t, b.claimConfig())
	procs := claim.Start(3, func(c *WorkerConfig) { c.Drain = true; c.PollInterval = 10 * time.Millisecond })
	claim.WaitCount(0, 20, 20*time.Second, "claim workers running busy-claim", isExec("busy-claim"))
	time.Sleep(rand.N(50 * time.Millisecond))
	claim.Shutdown(20*time.Second, procs...)
	f.CheckWorkers()
	claim.CheckWorkers()
	for _, name := range []string{"busy-leader", "busy-claim"} {
		runs, err := admin.Runs(ctx, name, 100000)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if r.Outcome == sqlease.OutcomeRunning {
				t.Errorf("run left running after a graceful drain: %+v", r)
			}
		}
		t.Logf("%d runs of %s", len(runs), name)
	}
}

// --- 6. claim mode: a database error in StartRun ---

// A claim-mode worker claims the one-off job "fragile" (max_attempts 1,
// lock_timeout 1 s), and the insert of its run row fails (an injected
// database error, as a busy or briefly unreachable database gives). The
// error is then cleared. The occurrence never started, so it must still
// run, once. (The bug this caught: the scheduler left the claim locked
// without heartbeat, the reclaim after lock_timeout counted a second
// attempt, found max_attempts used up and dropped the occurrence.)
func testStartRunFailure(t *testing.T, b *backend) {
	ctx := context.Background()
	admin := b.admin(t)
	if _, err := b.DB.ExecContext(ctx, `INSERT INTO `+FaultsTable(prefix)+` (job) VALUES ('fragile')`); err != nil {
		t.Fatal(err)
	}
	const lockTimeout = time.Second
	if _, _, err := admin.Create(ctx, sqlease.Job{Name: "fragile", LockTimeout: lockTimeout, Retry: sqlease.Retry{MaxAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	f := NewFleet(t, b.claimConfig())
	procs := f.Start(2, nil)
	deadline := time.Now().Add(10 * time.Second)
	var failed string
	for failed == "" {
		for _, p := range procs {
			for _, line := range strings.Split(p.Stderr(), "\n") {
				// SQLite claims, then starts the run (run_start_failed);
				// PostgreSQL claims and inserts the run in one statement,
				// so there the fault fails the whole claim (claim_failed).
				if strings.Contains(line, "run_start_failed") && strings.Contains(line, "job=fragile") ||
					strings.Contains(line, "claim_failed") && strings.Contains(line, "injected fault") {
					failed = line
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no run_start_failed (or claim_failed) for the job with the injected fault")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := b.DB.ExecContext(ctx, `DELETE FROM `+FaultsTable(prefix)); err != nil {
		t.Fatal(err)
	}
	j, _ := admin.Job(ctx, "fragile")
	t.Logf("fault cleared after: %s\njob now: locked_by=%q attempt=%d next_run_at=%s", failed, j.LockedBy, j.Attempt, FormatSF(j.NextRunAt))
	_, ran := f.TryWait(0, lockTimeout+slack, isExec("fragile"))
	f.Shutdown(20 * time.Second)
	f.CheckWorkers()
	j, _ = admin.Job(ctx, "fragile")
	runs, _ := admin.Runs(ctx, "fragile", 10)
	if !ran {
		t.Errorf("LOST OCCURRENCE: the one-off job never ran after a transient StartRun failure; job: locked_by=%q attempt=%d next_run_at=%q; runs: %+v",
			j.LockedBy, j.Attempt, FormatSF(j.NextRunAt), runs)
		for _, p := range procs {
			for _, line := range strings.Split(p.Stderr(), "\n") {
				if strings.Contains(line, "job=fragile") {
					t.Logf("%s: %s", p.Holder, line)
				}
			}
		}
	}
}

// timings holds what the scenarios measure; TestMain prints it (-v).
var timings fleettest.Timings

func recordTiming(dialect, what string, d time.Duration) {
	timings.Record(dialect+": "+what, d)
}
