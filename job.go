package sqlease

import (
	"encoding/json"
	"fmt"
	"regexp"
	"time"
)

// Schedule says when a job's occurrences fall. Exactly one of Every, Cron or
// At is set; all zero means once, now.
type Schedule struct {
	// Every is an interval measured from each occurrence's scheduled time, so
	// a late start never shifts later occurrences.
	Every time.Duration `json:"every,omitempty"`
	// Cron is a standard five-field cron expression (or a descriptor such as
	// "@hourly"), evaluated in Timezone.
	Cron string `json:"cron,omitempty"`
	// Timezone is an IANA zone name for Cron; empty means UTC.
	Timezone string `json:"timezone,omitempty"`
	// At is the single occurrence of a one-off job.
	At time.Time `json:"at,omitzero"`
	// Overlap says what happens to an occurrence that falls due while the
	// previous one still runs; empty is OverlapWait. It is kept with the
	// schedule, as Temporal keeps it among a schedule's policies: a job
	// without one stores and hashes as before.
	Overlap Overlap `json:"overlap,omitempty"`
	// MaxConcurrent bounds, with Overlap OverlapAllow, how many occurrences
	// of the job are in flight at once across the fleet, those awaiting a
	// retry included; 0 (the default) is no bound. Only with OverlapAllow.
	MaxConcurrent int `json:"max_concurrent,omitempty"`
}

// Overlap is a job's policy for an occurrence that falls due while the
// previous occurrence still runs. Occurrences of one job never run at the
// same time under any of them but OverlapAllow.
type Overlap string

const (
	// OverlapWait (the default, also the empty value) runs the occurrence
	// once the running one is done, as the missed-runs policy says.
	OverlapWait Overlap = "wait"
	// OverlapSkip records each occurrence that fell due while one ran as
	// skipped (OverlapSkippedError) when that run is done: none runs late,
	// none is silently dropped.
	OverlapSkip Overlap = "skip"
	// OverlapCancelRunning cancels the running occurrence when the next
	// falls due (it ends OutcomeCancelled, not retried), and runs the next.
	OverlapCancelRunning Overlap = "cancel_running"
	// OverlapAllow runs occurrences concurrently, each still exactly once
	// (retried with its own attempt count and idempotency key), at most
	// Schedule.MaxConcurrent at once when that is set. Each occurrence in
	// flight is locked on its own (see sqlstore.OccurrenceQueries).
	OverlapAllow Overlap = "allow"
)

// OverlapSkippedError is the error of an occurrence its overlap policy
// skipped; OverlapCancelledError that of a run it cancelled.
const (
	OverlapSkippedError   = "overlap skip: fell due while the previous occurrence ran"
	OverlapCancelledError = "overlap cancel_running: the next occurrence fell due"
)

// MissedRuns is a job's policy for occurrences that fell due while no one
// could run them (an outage, a leader crash).
type MissedRuns string

const (
	// RunOnce collapses the missed occurrences into one run of the latest.
	RunOnce MissedRuns = "run_once"
	// RunAll runs every missed occurrence, oldest first.
	RunAll MissedRuns = "run_all"
	// Skip runs none of them: only occurrences from now on.
	Skip MissedRuns = "skip"
)

// Retry is a job's policy after a failed attempt: up to MaxAttempts attempts
// per occurrence, the n-th retry waiting about Backoff×2^(n-1) with jitter.
type Retry struct {
	MaxAttempts int           `json:"max_attempts,omitempty"`
	Backoff     time.Duration `json:"backoff,omitempty"`
}

// Outcome is the result of one run attempt.
type Outcome string

const (
	OutcomeRunning   Outcome = "running"
	OutcomeSucceeded Outcome = "succeeded"
	OutcomeFailed    Outcome = "failed"
	OutcomeAbandoned Outcome = "abandoned"
	OutcomeTimedOut  Outcome = "timed_out"
	// OutcomeSkipped is an occurrence recorded without running: its job's
	// breaker was open (Breaker), or its overlap policy skips it.
	OutcomeSkipped Outcome = "skipped"
	// OutcomeCancelled is a run ended on purpose before it finished (an
	// overlap policy that cancels the running occurrence).
	OutcomeCancelled Outcome = "cancelled"
)

// Breaker is a job's circuit breaker, opt-in (the zero value is none):
// after Failures consecutive failed occurrences (an occurrence fails when
// its last attempt does) the breaker opens, and the occurrences that fall
// due are recorded as skipped, with the error BreakerOpenError, until
// CoolDown has passed in database time; then the next one runs as a probe
// (half open): its success closes the breaker, its failure opens it again
// for another CoolDown. The words are failsafe-go's (and Nygard's); the
// state is not theirs: it lives on the job row, so that every node and the
// next leader agree on it, and it changes only in the fenced transaction
// that finishes a run.
type Breaker struct {
	Failures int           `json:"failures,omitempty"`
	CoolDown time.Duration `json:"cool_down,omitempty"`
}

// IsZero reports whether no breaker is set.
func (b Breaker) IsZero() bool { return b.Failures == 0 }

// BreakerOpenError is the error of an occurrence a breaker skipped.
const BreakerOpenError = "breaker open"

// States of a job's breaker (Job.BreakerState).
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half_open"
)

// Job is a stored job. Times are database UTC.
type Job struct {
	ID   int64
	Name string
	// Key is the client's idempotency key for creation, if any.
	Key      string
	Schedule Schedule
	// Action is opaque to the scheduler: the daemon stores its HTTP or exec
	// action here; a library user may leave it empty and route by Name.
	Action          json.RawMessage
	MissedRuns      MissedRuns
	SkipIfOlderThan time.Duration
	Retry           Retry
	LockTimeout     time.Duration
	// Breaker is the job's circuit breaker; zero: none.
	Breaker Breaker
	Paused  bool
	// PauseReason is what the pause said, if anything (empty while
	// active).
	PauseReason string

	// NextRunAt is the next occurrence due; zero when none remains.
	NextRunAt time.Time
	LastRunAt time.Time
	// Attempt is the number of attempts started for the occurrence at
	// NextRunAt (authoritative attempt_count).
	Attempt   int
	LockedBy  string
	LockedAt  time.Time
	LockEpoch int64
	CreatedAt time.Time
	// RegularNextAt is the regular occurrence a trigger moved aside (zero:
	// none): the triggered run, once done, leaves the job there, so that a
	// trigger never shifts a schedule's phase.
	RegularNextAt time.Time
	// BreakerFailures counts the consecutive failed occurrences; while
	// BreakerOpenedAt is set the breaker is open (half open once CoolDown
	// has passed); BreakerChangedAt is when it last opened or closed.
	BreakerFailures  int
	BreakerOpenedAt  time.Time
	BreakerChangedAt time.Time
	// LastModifiedAt is the database time of the last write to the job's
	// definition or schedule state: create, pause, resume, trigger, a run's
	// start or finish. A claim or heartbeat writes only the lock columns
	// (LockedAt is their time) and leaves it alone: no index then covers
	// what they change, so on PostgreSQL a claim is a HOT update (no index
	// entry), and no reader of the leader's change cursor needs them.
	LastModifiedAt time.Time
}

// BreakerState is the state of j's breaker at now (database time) and
// since when: closed (since it last closed, zero if it never opened), open
// (since it opened) or half_open (since its cool-down ended: the next
// occurrence runs as a probe). It is "" when j has no breaker.
func (j Job) BreakerState(now time.Time) (state string, since time.Time) {
	switch {
	case j.Breaker.IsZero():
		return "", time.Time{}
	case j.BreakerOpenedAt.IsZero():
		return BreakerClosed, j.BreakerChangedAt
	case now.Before(j.BreakerOpenedAt.Add(j.Breaker.CoolDown)):
		return BreakerOpen, j.BreakerOpenedAt
	default:
		return BreakerHalfOpen, j.BreakerOpenedAt.Add(j.Breaker.CoolDown)
	}
}

// Run is one attempt of one occurrence, as handed to a handler and recorded
// in the append-only run ledger.
type Run struct {
	JobID        int64
	Job          string
	ScheduledFor time.Time
	Attempt      int
	// Holder and Epoch fence the run's writes: the leader's lease epoch in
	// leader dispatch, the job lock's epoch in claim dispatch.
	Holder     string
	Epoch      int64
	StartedAt  time.Time
	FinishedAt time.Time
	Outcome    Outcome
	Error      string
	// Output is the kept tail of the action's output (empty: none), as
	// the store returns it with the run; see scheduler.SetOutput.
	Output string
	// Checkpoint is a JSON value (nil: none). Handed to a handler, it is
	// the last checkpoint an earlier attempt of the same occurrence saved
	// (scheduler.Checkpoint), so that a retry after a crash, a failover or
	// a failure resumes from there; nil on a first attempt. As the store
	// returns a run (the runs API), it is the last checkpoint that attempt
	// saved itself.
	Checkpoint json.RawMessage
	// Action is the job's action at the time the run started (handlers
	// only; not stored with the run).
	Action json.RawMessage
}

// IdempotencyKey is "<job name>/<scheduled_for>", stable across retries and
// failovers of one occurrence.
func (r Run) IdempotencyKey() string {
	return r.Job + "/" + r.ScheduledFor.UTC().Format(time.RFC3339Nano)
}

var jobNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)

// ValidateJobName returns an error wrapping ErrInvalidName unless name is
// 1–128 characters of a-z 0-9 . _ - starting with a letter or digit.
func ValidateJobName(name string) error {
	if !jobNameRE.MatchString(name) {
		return fmt.Errorf("%w: job name %q must be 1-128 characters of a-z 0-9 . _ - starting with a letter or digit", ErrInvalidName, name)
	}
	return nil
}
