package prom_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/prom"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEventMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	o := prom.New(reg, "lead")

	o.AcquireAttempted("lead", 3*time.Millisecond, true, nil)
	o.AcquireAttempted("lead", 2*time.Millisecond, false, sqlease.ErrLeaseHeld)
	o.AcquireAttempted("lead", 2*time.Millisecond, false, errors.New("connection refused"))
	o.AcquireAttempted("lead", 2*time.Millisecond, false, errors.New("connection refused"))
	o.AcquireAttempted("other", time.Millisecond, true, nil) // another lease: ignored
	o.Renewed("lead", 4*time.Millisecond, nil)
	o.Renewed("lead", 2*time.Second, errors.New("timeout"))
	o.LeadershipChanged("lead", true, 1)
	o.LeadershipChanged("lead", false, 1)
	o.LeadershipChanged("lead", true, 3)
	o.Blocked("lead")
	o.Blocked("lead")
	o.Blocked("other")
	o.RunFinished("nightly", sqlease.OutcomeSucceeded, 1500*time.Millisecond)
	o.RunFinished("hourly", sqlease.OutcomeSucceeded, 20*time.Millisecond)
	o.RunFinished("nightly", sqlease.OutcomeTimedOut, 30*time.Second)
	o.RunFinished("nightly", sqlease.Outcome("bogus"), time.Second)
	o.JobRowCorrupt("hand-edited")
	o.JobRowCorrupt("hand-edited")
	o.RunFinished("flaky", sqlease.OutcomeSkipped, 0)
	o.BreakerSkipped("flaky")

	want := `
# HELP sqlease_acquire_attempts_total Acquire statements sent for a missing or expired lease, by result (acquired, held, error).
# TYPE sqlease_acquire_attempts_total counter
sqlease_acquire_attempts_total{result="acquired"} 1
sqlease_acquire_attempts_total{result="error"} 2
sqlease_acquire_attempts_total{result="held"} 1
# HELP sqlease_executions_blocked_not_leader_total Calls refused by the acting gate because this instance does not lead or no longer trusts its lease.
# TYPE sqlease_executions_blocked_not_leader_total counter
sqlease_executions_blocked_not_leader_total 2
# HELP sqlease_leader_acquired_total Times this instance acquired the leader lease and started leading.
# TYPE sqlease_leader_acquired_total counter
sqlease_leader_acquired_total 2
# HELP sqlease_leadership_lost_total Times a leadership term of this instance ended: lease lost, renew deadline missed, fence failed or shutdown.
# TYPE sqlease_leadership_lost_total counter
sqlease_leadership_lost_total 1
# HELP sqlease_job_runs_total Finished job run attempts executed by this instance, by outcome.
# TYPE sqlease_job_runs_total counter
sqlease_job_runs_total{outcome="abandoned"} 0
sqlease_job_runs_total{outcome="cancelled"} 0
sqlease_job_runs_total{outcome="failed"} 0
sqlease_job_runs_total{outcome="other"} 1
sqlease_job_runs_total{outcome="skipped"} 1
sqlease_job_runs_total{outcome="succeeded"} 2
sqlease_job_runs_total{outcome="timed_out"} 1
# HELP sqlease_job_rows_corrupt_total Job rows this instance claimed but could not decode (edited by hand, or written by a newer version), each set aside for a minute unrun; logged as job_row_corrupt.
# TYPE sqlease_job_rows_corrupt_total counter
sqlease_job_rows_corrupt_total 2
# HELP sqlease_job_breaker_skipped_total Occurrences this instance recorded as skipped because their job's breaker was open (logged as run_skipped with the job's name).
# TYPE sqlease_job_breaker_skipped_total counter
sqlease_job_breaker_skipped_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"sqlease_acquire_attempts_total", "sqlease_executions_blocked_not_leader_total",
		"sqlease_leader_acquired_total", "sqlease_leadership_lost_total", "sqlease_job_runs_total",
		"sqlease_job_rows_corrupt_total", "sqlease_job_breaker_skipped_total"); err != nil {
		t.Fatal(err)
	}

	// Histograms: counts and sums.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	hist := map[string]struct {
		count uint64
		sum   float64
	}{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				key := mf.GetName()
				for _, lp := range m.GetLabel() {
					key += "/" + lp.GetValue()
				}
				hist[key] = struct {
					count uint64
					sum   float64
				}{h.GetSampleCount(), h.GetSampleSum()}
			}
		}
	}
	check := func(key string, count uint64, sum float64) {
		t.Helper()
		got := hist[key]
		if got.count != count || got.sum < sum-1e-9 || got.sum > sum+1e-9 {
			t.Errorf("%s: count %d sum %g, want %d and %g", key, got.count, got.sum, count, sum)
		}
	}
	check("sqlease_acquire_duration_seconds", 4, 0.009)
	check("sqlease_renew_duration_seconds", 2, 2.004)
	check("sqlease_job_run_duration_seconds/succeeded", 2, 1.52)
	check("sqlease_job_run_duration_seconds/timed_out", 1, 30)
	check("sqlease_job_run_duration_seconds/failed", 0, 0)
	check("sqlease_job_run_duration_seconds/other", 1, 1)

	if err := testutil.GatherAndCompare(reg, strings.NewReader(""), "sqlease_is_leader"); err != nil {
		t.Fatalf("is_leader before WatchElector: %v", err)
	}
}

func TestBucketsAndLint(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	o := prom.New(reg, "")
	o.WatchElector(func() election.Status { return election.Status{} })
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
	if got := prom.LatencyBuckets; got[0] != 0.001 || got[len(got)-1] != 5 {
		t.Errorf("latency buckets %v, want 1ms..5s", got)
	}
	// Every metric carries the sqlease_ prefix, and none is labelled by job
	// or lease name.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "sqlease_") {
			t.Errorf("metric %s lacks the sqlease_ prefix", mf.GetName())
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() != "result" && lp.GetName() != "outcome" {
					t.Errorf("metric %s has unbounded label %s", mf.GetName(), lp.GetName())
				}
			}
		}
	}
}

func TestWatchElectorGauges(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	o := prom.New(reg, "lead")
	now := time.Date(2030, 1, 1, 0, 0, 10, 0, time.UTC)
	prom.SetNow(o, func() time.Time { return now })
	st := election.Status{}
	o.WatchElector(func() election.Status { return st })

	gauges := func() (isLeader, epoch, age float64) {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetGauge() == nil {
				continue
			}
			v := mf.GetMetric()[0].GetGauge().GetValue()
			switch mf.GetName() {
			case "sqlease_is_leader":
				isLeader = v
			case "sqlease_leader_epoch":
				epoch = v
			case "sqlease_heartbeat_age_seconds":
				age = v
			}
		}
		return
	}

	// Never contacted: the age counts from WatchElector.
	now = now.Add(3 * time.Second)
	if l, e, a := gauges(); l != 0 || e != 0 || a != 3 {
		t.Errorf("never contacted: is_leader %g epoch %g age %g, want 0 0 3", l, e, a)
	}
	// A follower that saw epoch 4 of someone else, 1.5s ago.
	st = election.Status{LeaderKnown: true, Leader: sqlease.Lease{Holder: "b", Epoch: 4}, LastContact: now.Add(-1500 * time.Millisecond)}
	if l, e, a := gauges(); l != 0 || e != 4 || a != 1.5 {
		t.Errorf("follower: is_leader %g epoch %g age %g, want 0 4 1.5", l, e, a)
	}
	// Leading under epoch 5, renewed 0.5s ago.
	st = election.Status{Leading: true, Token: sqlease.Token{Name: "lead", Holder: "a", Epoch: 5}, LeaderKnown: true,
		Leader: sqlease.Lease{Holder: "a", Epoch: 5}, LastContact: now.Add(-500 * time.Millisecond)}
	if l, e, a := gauges(); l != 1 || e != 5 || a != 0.5 {
		t.Errorf("leader: is_leader %g epoch %g age %g, want 1 5 0.5", l, e, a)
	}
}

// TestWithRealElector wires the observer into an elector on SQLite.
func TestWithRealElector(t *testing.T) {
	ctx := context.Background()
	store := dbtest.SQLite(t)
	reg := prometheus.NewRegistry()
	o := prom.New(reg, "lead")
	el, err := election.New(election.Config{
		Store: store, LeaseName: "lead", HolderID: "node-a",
		LeaseDuration: time.Second, RenewInterval: 100 * time.Millisecond, AcquireInterval: 50 * time.Millisecond,
		Observer: o,
	})
	if err != nil {
		t.Fatal(err)
	}
	o.WatchElector(el.Status)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = el.Run(runCtx) }()

	dbtest.WaitFor(t, 5*time.Second, "leadership and a renew", func() bool {
		return el.IsLeader() && histCount(t, reg, "sqlease_renew_duration_seconds") > 0
	})
	want := `
# HELP sqlease_is_leader 1 while this instance leads (its acting gate is open), else 0.
# TYPE sqlease_is_leader gauge
sqlease_is_leader 1
# HELP sqlease_leader_epoch Epoch of the leader lease as last observed by this instance (its own while leading); 0 before the lease was read.
# TYPE sqlease_leader_epoch gauge
sqlease_leader_epoch 1
# HELP sqlease_leader_acquired_total Times this instance acquired the leader lease and started leading.
# TYPE sqlease_leader_acquired_total counter
sqlease_leader_acquired_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sqlease_is_leader", "sqlease_leader_epoch", "sqlease_leader_acquired_total"); err != nil {
		t.Error(err)
	}
	blocked := testutil.ToFloat64(o.BlockedForTest())
	el.IsLeader() // open gate: not blocked
	cancel()
	<-done
	if el.IsLeader() {
		t.Fatal("still leader after shutdown")
	}
	if got := testutil.ToFloat64(o.BlockedForTest()); got != blocked+1 {
		t.Errorf("blocked after shutdown = %g, want %g", got, blocked+1)
	}
	if got := testutil.ToFloat64(o.LostForTest()); got != 1 {
		t.Errorf("leadership_lost_total after shutdown = %g, want 1", got)
	}
}

// histCount returns the sample count of an unlabelled histogram.
func histCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}
