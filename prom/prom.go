// Package prom exports sqlease's metrics to Prometheus: an Observer that
// implements both sqlease.Observer (the elector's events) and
// scheduler.Observer (finished runs), registered on a registry the caller
// injects — never on the package-global default registry.
//
// # Metrics
//
// Counters and histograms, fed by events:
//
//	sqlease_leader_acquired_total                   terms this instance started leading
//	sqlease_leadership_lost_total                   terms that ended, for any reason (lost, deadline, shutdown)
//	sqlease_acquire_attempts_total{result}          acquire statements: acquired, held or error
//	sqlease_executions_blocked_not_leader_total     calls refused by the acting gate (Require/Ensure)
//	sqlease_acquire_duration_seconds                latency of acquire statements
//	sqlease_renew_duration_seconds                  latency of renew statements, successful or not
//	sqlease_job_runs_total{outcome}                 finished run attempts by outcome
//	sqlease_job_run_duration_seconds{outcome}       duration of finished run attempts by outcome
//	sqlease_job_rows_corrupt_total                  claimed job rows that could not be decoded, each set aside
//	sqlease_job_breaker_skipped_total               occurrences recorded as skipped because their job's breaker was open
//
// Gauges, read from the elector's status at scrape time (see WatchElector):
//
//	sqlease_is_leader                 1 while this instance's acting gate is open, else 0
//	sqlease_leader_epoch              the lease epoch last observed (this instance's own while leading; 0 before the lease was read)
//	sqlease_heartbeat_age_seconds     seconds since the elector's last successful database call
//
// heartbeat_age_seconds is the age of election.Status.LastContact: while
// leading that is the last successful renew (so it stays below the renew
// interval on a healthy leader), while following the last successful lease
// read or acquire attempt. Before the first contact it counts from the call
// to WatchElector, so a node that never reaches its database shows a growing
// age rather than no value.
//
// Labels are bounded: result has three values and outcome five; no metric is
// labelled by job or lease name. Series for every result and outcome are
// created at zero by New, so rate() and absence alerts work from the start.
package prom

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/scheduler"
)

// Namespace prefixes every metric name.
const Namespace = "sqlease"

// Values of the result label of sqlease_acquire_attempts_total.
const (
	ResultAcquired = "acquired"
	ResultHeld     = "held"
	ResultError    = "error"
)

// outcomeOther is the outcome label of a finished run whose outcome is none
// of the known ones (it should not happen; it keeps the label bounded).
const outcomeOther = "other"

var (
	// LatencyBuckets are the buckets of the acquire and renew latency
	// histograms, in seconds: 1ms to 5s.
	LatencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
	// RunBuckets are the buckets of sqlease_job_run_duration_seconds: 10ms
	// to one hour.
	RunBuckets = []float64{.01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600}
)

var knownOutcomes = []sqlease.Outcome{
	sqlease.OutcomeSucceeded, sqlease.OutcomeFailed, sqlease.OutcomeAbandoned, sqlease.OutcomeTimedOut,
	sqlease.OutcomeSkipped, sqlease.OutcomeCancelled,
}

// Observer records sqlease events as Prometheus metrics. Create it with New;
// pass it as election.Config.Observer and scheduler.Config.Observer, and call
// WatchElector once the elector exists. Its methods are safe for concurrent
// use and never block.
type Observer struct {
	reg       prometheus.Registerer
	leaseName string
	now       func() time.Time // for heartbeat age; time.Now unless a test sets it

	acquired       prometheus.Counter
	lost           prometheus.Counter
	attempts       *prometheus.CounterVec
	blocked        prometheus.Counter
	acquireDur     prometheus.Histogram
	renewDur       prometheus.Histogram
	runs           *prometheus.CounterVec
	runDur         *prometheus.HistogramVec
	corrupt        prometheus.Counter
	breakerSkipped prometheus.Counter
}

var (
	_ sqlease.Observer          = (*Observer)(nil)
	_ scheduler.Observer        = (*Observer)(nil)
	_ scheduler.CorruptObserver = (*Observer)(nil)
)

// New creates the event-fed metrics and registers them on reg. leaseName
// selects the lease whose elector events are recorded: events about another
// lease are ignored (an empty leaseName records every event). New panics,
// like prometheus.MustRegister, if reg already holds metrics with these
// names — use a fresh registry per Observer.
func New(reg prometheus.Registerer, leaseName string) *Observer {
	o := &Observer{
		reg:        reg,
		leaseName:  leaseName,
		now:        time.Now,
		acquired:   prometheus.NewCounter(counterOpts("leader_acquired_total", "Times this instance acquired the leader lease and started leading.")),
		lost:       prometheus.NewCounter(counterOpts("leadership_lost_total", "Times a leadership term of this instance ended: lease lost, renew deadline missed, fence failed or shutdown.")),
		attempts:   prometheus.NewCounterVec(counterOpts("acquire_attempts_total", "Acquire statements sent for a missing or expired lease, by result (acquired, held, error)."), []string{"result"}),
		blocked:    prometheus.NewCounter(counterOpts("executions_blocked_not_leader_total", "Calls refused by the acting gate because this instance does not lead or no longer trusts its lease.")),
		acquireDur: prometheus.NewHistogram(histogramOpts("acquire_duration_seconds", "Latency of acquire statements.", LatencyBuckets)),
		renewDur:   prometheus.NewHistogram(histogramOpts("renew_duration_seconds", "Latency of renew statements, successful or not.", LatencyBuckets)),
		runs:       prometheus.NewCounterVec(counterOpts("job_runs_total", "Finished job run attempts executed by this instance, by outcome."), []string{"outcome"}),
		runDur:     prometheus.NewHistogramVec(histogramOpts("job_run_duration_seconds", "Duration of finished job run attempts executed by this instance, by outcome.", RunBuckets), []string{"outcome"}),
		corrupt:    prometheus.NewCounter(counterOpts("job_rows_corrupt_total", "Job rows this instance claimed but could not decode (edited by hand, or written by a newer version), each set aside for a minute unrun; logged as job_row_corrupt.")),
	}
	for _, r := range []string{ResultAcquired, ResultHeld, ResultError} {
		o.attempts.WithLabelValues(r)
	}
	for _, oc := range knownOutcomes {
		o.runs.WithLabelValues(string(oc))
		o.runDur.WithLabelValues(string(oc))
	}
	o.breakerSkipped = prometheus.NewCounter(counterOpts("job_breaker_skipped_total", "Occurrences this instance recorded as skipped because their job's breaker was open (logged as run_skipped with the job's name)."))
	reg.MustRegister(o.acquired, o.lost, o.attempts, o.blocked, o.acquireDur, o.renewDur, o.runs, o.runDur, o.corrupt, o.breakerSkipped)
	return o
}

// counterOpts, gaugeOpts and histogramOpts name a metric of this package:
// sqlease_<name>, with its help text.
func counterOpts(name, help string) prometheus.CounterOpts {
	return prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}
}

func gaugeOpts(name, help string) prometheus.GaugeOpts {
	return prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}
}

func histogramOpts(name, help string, buckets []float64) prometheus.HistogramOpts {
	return prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}
}

// WatchElector registers the gauges sqlease_is_leader, sqlease_leader_epoch
// and sqlease_heartbeat_age_seconds, each read from status at scrape time
// (pass an *election.Elector's Status method). Call it once: a second call
// panics, as prometheus.MustRegister does.
func (o *Observer) WatchElector(status func() election.Status) {
	since := o.now()
	o.reg.MustRegister(
		prometheus.NewGaugeFunc(gaugeOpts("is_leader", "1 while this instance leads (its acting gate is open), else 0."), func() float64 {
			if status().Leading {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(gaugeOpts("leader_epoch", "Epoch of the leader lease as last observed by this instance (its own while leading); 0 before the lease was read."), func() float64 {
			return float64(Epoch(status()))
		}),
		prometheus.NewGaugeFunc(gaugeOpts("heartbeat_age_seconds", "Seconds since the elector's last successful database call: the last renew while leading, the last lease poll while following."), func() float64 {
			last := status().LastContact
			if last.IsZero() {
				last = since
			}
			return o.now().Sub(last).Seconds()
		}),
	)
}

// Epoch is the lease epoch a status reports: its own token's while leading,
// else the last lease row observed, else 0.
func Epoch(st election.Status) int64 {
	switch {
	case st.Leading:
		return st.Token.Epoch
	case st.LeaderKnown:
		return st.Leader.Epoch
	}
	return 0
}

func (o *Observer) mine(name string) bool { return o.leaseName == "" || name == o.leaseName }

// AcquireAttempted implements sqlease.Observer: it counts the attempt by
// result and records its latency.
func (o *Observer) AcquireAttempted(name string, took time.Duration, acquired bool, err error) {
	if !o.mine(name) {
		return
	}
	result := ResultError
	switch {
	case acquired:
		result = ResultAcquired
	case err == nil, errors.Is(err, sqlease.ErrLeaseHeld):
		result = ResultHeld
	}
	o.attempts.WithLabelValues(result).Inc()
	o.acquireDur.Observe(took.Seconds())
}

// Renewed implements sqlease.Observer: it records the renew's latency.
func (o *Observer) Renewed(name string, took time.Duration, _ error) {
	if !o.mine(name) {
		return
	}
	o.renewDur.Observe(took.Seconds())
}

// LeadershipChanged implements sqlease.Observer: it counts started and
// ended terms.
func (o *Observer) LeadershipChanged(name string, leading bool, _ int64) {
	if !o.mine(name) {
		return
	}
	if leading {
		o.acquired.Inc()
	} else {
		o.lost.Inc()
	}
}

// Blocked implements sqlease.Observer: it counts a refusal of the acting
// gate.
func (o *Observer) Blocked(name string) {
	if !o.mine(name) {
		return
	}
	o.blocked.Inc()
}

// JobRowCorrupt implements scheduler.CorruptObserver: it counts the row.
// The job name is not recorded (it is in the log), to keep the number of
// series bounded.
func (o *Observer) JobRowCorrupt(string) { o.corrupt.Inc() }

// BreakerSkipped implements scheduler.BreakerObserver: it counts the
// occurrence. The job name is not recorded, to keep the number of series
// bounded (a label per job is a series per job, forever): the log has it,
// and the API shows each job's breaker state.
func (o *Observer) BreakerSkipped(string) { o.breakerSkipped.Inc() }

// RunFinished implements scheduler.Observer: it counts the run attempt by
// outcome and records its duration. The job name is not recorded, to keep
// the number of series bounded.
func (o *Observer) RunFinished(_ string, outcome sqlease.Outcome, took time.Duration) {
	label := outcomeOther
	for _, oc := range knownOutcomes {
		if outcome == oc {
			label = string(oc)
			break
		}
	}
	o.runs.WithLabelValues(label).Inc()
	o.runDur.WithLabelValues(label).Observe(took.Seconds())
}
