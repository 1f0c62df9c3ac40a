// Package scheduler runs jobs exactly once per occurrence on the tables of a
// sqlstore.Store, dispatched either by the elected leader or by every worker
// claiming due jobs.
//
// # Exactly once
//
// An occurrence (job, scheduled_for) starts only after its dispatcher locked
// the job row in one conditional statement: locked_by, locked_at and a lock
// epoch that goes up with every claim. Every later write of the run — the run
// row, heartbeats, the outcome and the job's next_run_at — is conditional on
// that lock (job id, holder, lock epoch), and in leader mode also runs inside
// a transaction fenced by the leader's lease. A write that matches no row
// means the run was taken over: the run's context is cancelled and it writes
// nothing more. Runs are unique on (job, scheduled_for, attempt), so two
// dispatchers can never both start one attempt.
//
// An executor that dies mid-run leaves its lock to go stale (claim mode:
// locked_at + lock_timeout; leader mode: also a lock taken under an older
// lease epoch). The next owner retries the same occurrence with the next
// attempt number and the same idempotency key, so effects outside the
// database are at-least-once with a stable key, and effects inside it, made
// through fenced writes, are exactly-once.
//
// # Dispatch
//
// Claim mode (Run): each worker polls, claims a batch of due jobs in one
// statement, heartbeats each lock while running, and cancels the run's
// context after HeartbeatFailures consecutive failed heartbeats. Between
// polls it claims when it knows a job falls due — from its own finishes,
// NextDue, a change — which is only ever a wake-up hint: the claim decides,
// in database time (ontime.go).
//
// Leader mode (Lead, called from the elector's OnStartedLeading): only the
// leader keeps an in-memory schedule, bounded to the jobs due within
// ScheduleHorizon and at most MaxScheduled entries. It rebuilds it on
// becoming leader, refreshes it every RefreshInterval from the composite
// cursor (last_modified_at, id) — re-reading an overlap window so that a row
// stamped earlier but committed later is not skipped — and executes due jobs,
// each claim fenced by the lease.
//
// # Overlap
//
// Occurrences of one job never run at once: the job row holds one lock. A
// job's overlap policy (sqlease.Schedule.Overlap) says what becomes of an
// occurrence that falls due while one runs: wait (run it after, as the
// missed-runs policy says), skip (recorded as skipped with the finish of
// the run it overlapped, in its fenced transaction) or cancel_running (the
// run's context is cancelled when the next falls due; it ends cancelled).
//
// # Trigger, pause and breaker
//
// Trigger makes a job due now, once. The regular occurrence it moves aside
// is kept on the job row (regular_next_at) and the triggered run, once
// done, leaves the job there: an every job keeps its phase, and no regular
// occurrence is lost or run twice (the triggered occurrence is one of its
// own in the ledger). A paused or running job refuses a trigger
// (sqlease.ErrConflict). Pauses carry an optional reason, and PausePrefix
// and ResumePrefix change every job of a name prefix in one statement.
//
// A job's breaker (sqlease.Breaker, opt-in) counts its failed occurrences
// in a row on the job row. At the threshold it opens: the occurrences that
// fall due are recorded as skipped ("breaker open"), each once like a run,
// until the cool-down has passed in database time (the claim's clock);
// then the next one runs as the probe, and its finish closes the breaker
// or opens it again. A triggered occurrence is a probe at once, whatever
// the cool-down: the operator asked for a run. Its state changes only in the transaction that
// finishes a run, under the run's lock and (leader mode) its lease, so
// every node and the next leader agree on it. failsafe-go's breaker, which
// the daemon's other code uses, keeps its state in process memory: one per
// node, lost with a leader; only its vocabulary is used here.
package scheduler

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/tick"
	"github.com/sqlease/sqlease/sqlstore"
)

// Handler runs one attempt of one occurrence. ctx is cancelled when the run
// may no longer act (lock or leadership lost, shutdown); call Ensure(ctx)
// just before an irreversible external step. A returned error marks the
// attempt failed (timed_out if it wraps sqlease.ErrTimedOut).
type Handler func(ctx context.Context, run sqlease.Run) error

// Gate is the acting gate of leader mode (an *election.Elector).
type Gate interface {
	Ensure(tok sqlease.Token) error
	Fenced(ctx context.Context, tok sqlease.Token, fn func(*sql.Tx) error) error
}

// resigner is a Gate that can give its term up (election.Elector.Resign):
// Lead does so when its dispatcher cannot run, unless
// Config.KeepLeaseOnDispatchFailure.
type resigner interface {
	Resign(tok sqlease.Token, reason string)
}

// priorTerms is a Gate that knows when earlier terms' holders can no longer
// be acting (election.Elector.PriorTermsEnd): Lead retries no occurrence
// interrupted under an earlier term before then.
type priorTerms interface {
	PriorTermsEnd(tok sqlease.Token) time.Time
}

// Defaults.
const (
	DefaultPollInterval  = time.Second
	DefaultBatchSize     = 32
	DefaultMaxConcurrent = 64
	// On a store that starts and finishes runs in batches (PostgreSQL), a
	// run holds no connection of its own, and larger claims amortize the
	// statements: about 2.5× the throughput of no-op jobs of 32/64.
	DefaultBatchedBatchSize     = 256
	DefaultBatchedMaxConcurrent = 512
	DefaultLockTimeout          = 2 * time.Minute
	DefaultHeartbeatFailures    = 3
	DefaultRefreshInterval      = time.Second
	DefaultRefreshOverlap       = 5 * time.Second
	DefaultScheduleHorizon      = time.Minute
	DefaultMaxScheduled         = 10_000
	DefaultShutdownTimeout      = 10 * time.Second
	DefaultRunRetention         = 30 * 24 * time.Hour
	DefaultFallbackRefresh      = 30 * time.Second
	// DefaultDispatchFailureLimit is how long a leader's dispatcher may
	// fail (its schedule cannot be built or refreshed) before Lead gives up;
	// the default lease duration.
	DefaultDispatchFailureLimit = 6 * time.Second
)

// Config configures a Scheduler. Zero fields take the documented defaults.
type Config struct {
	// Store holds jobs and runs (required).
	Store *sqlstore.Store
	// Holder identifies this instance in locks and runs (required in claim
	// mode; leader mode uses the lease holder).
	Holder string
	// Handler runs jobs (required to dispatch).
	Handler Handler
	// ValidateAction checks a job's action on creation; nil accepts any.
	ValidateAction func(json.RawMessage) error

	// PollInterval is how often a claim-mode worker looks for due jobs
	// when it knows of none sooner. It claims earlier when it knows a job
	// falls due (ontime.go): the next occurrence a run of its own left (at
	// once for a job behind), the earliest one still to come (asked after
	// a claim that took jobs), a change (Changes, or this Scheduler's own
	// Create, Resume, Trigger). Idle, it makes one claim per PollInterval.
	// Default DefaultPollInterval.
	PollInterval time.Duration
	// BatchSize is how many due jobs one claim statement may lock. Default
	// DefaultBatchedBatchSize on a store that batches (Store.Batched), else
	// DefaultBatchSize.
	BatchSize int
	// MaxConcurrent bounds the handlers executing at once in this instance
	// (and, separately, the finished runs waiting for their outcome to be
	// written). Default DefaultBatchedMaxConcurrent in claim mode on a store
	// that batches, else DefaultMaxConcurrent: there every run uses a
	// connection of its own to start and finish.
	MaxConcurrent int
	// HeartbeatInterval is how often a running job's lock is extended in
	// claim mode. Default: the job's lock_timeout / 4.
	HeartbeatInterval time.Duration
	// HeartbeatFailures consecutive failed heartbeats cancel the run.
	HeartbeatFailures int
	// RefreshInterval is the leader's schedule_refresh_interval.
	RefreshInterval time.Duration
	// Changes, when set, signals that jobs may have changed (PostgreSQL:
	// postgres.ListenJobs). The leader then refreshes when signalled — at
	// most once per RefreshInterval — and otherwise every FallbackRefresh;
	// a claim-mode worker claims at once and asks when the next job falls
	// due, and claims then, not at its next poll: a job created or
	// triggered through another node runs on time. One Scheduler's
	// dispatch reads it: give a scheduler that both leads and claims a
	// feed each.
	Changes <-chan struct{}
	// FallbackRefresh is the refresh period when Changes is set; it bounds
	// the delay of a lost notification. Default DefaultFallbackRefresh.
	FallbackRefresh time.Duration
	// RefreshOverlap is how far behind its cursor the leader re-reads, to
	// catch rows stamped earlier that committed later. It must exceed the
	// longest transaction that writes jobs.
	RefreshOverlap time.Duration
	// ScheduleHorizon and MaxScheduled bound the leader's in-memory schedule.
	ScheduleHorizon time.Duration
	MaxScheduled    int
	// ShutdownTimeout bounds how long in-flight runs may finish on shutdown
	// before they are cancelled.
	ShutdownTimeout time.Duration
	// RunRetention is how long finished runs stay in the ledger; older ones
	// are deleted periodically by the dispatching instances. Default
	// DefaultRunRetention; negative keeps them forever.
	RunRetention time.Duration
	// OutputLimit is how many bytes of each run's output (SetOutput) are
	// kept with the run: its tail. Default DefaultOutputLimit; negative
	// keeps none; at most MaxOutputLimit.
	OutputLimit int
	// DispatchFailureLimit is how long Lead retries a schedule rebuild or
	// refresh that keeps failing before it returns an error — and resigns
	// the term through the gate, unless KeepLeaseOnDispatchFailure, so that
	// another instance can lead: leading means dispatching. Default
	// DefaultDispatchFailureLimit; set it to the lease duration.
	DispatchFailureLimit time.Duration
	// KeepLeaseOnDispatchFailure makes Lead return its error without
	// resigning the term; the caller decides.
	KeepLeaseOnDispatchFailure bool

	// Logger receives run events; nil discards.
	Logger *slog.Logger
	// Observer receives run metrics; nil ignores them.
	Observer Observer
}

// Observer receives scheduler events for metrics.
type Observer interface {
	// RunFinished is called once a run's outcome write has returned
	// (written, or failed), with the handler's duration.
	RunFinished(job string, outcome sqlease.Outcome, took time.Duration)
}

// BreakerObserver is what an Observer may also implement to count the
// occurrences a job's open breaker skipped (each also reaches RunFinished
// as sqlease.OutcomeSkipped). Calls must not block.
type BreakerObserver interface {
	BreakerSkipped(job string)
}

// CorruptObserver is what an Observer may also implement to learn of each
// claimed job whose row could not be decoded and was set aside unrun
// (logged as job_row_corrupt): an operator must mend or delete such a row.
// Like Observer's, calls must not block.
type CorruptObserver interface {
	JobRowCorrupt(job string)
}

type nopObserver struct{}

func (nopObserver) RunFinished(string, sqlease.Outcome, time.Duration) {}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.PollInterval, DefaultPollInterval)
	def(&c.RefreshInterval, DefaultRefreshInterval)
	def(&c.RefreshOverlap, DefaultRefreshOverlap)
	def(&c.ScheduleHorizon, DefaultScheduleHorizon)
	def(&c.ShutdownTimeout, DefaultShutdownTimeout)
	def(&c.RunRetention, DefaultRunRetention)
	def(&c.FallbackRefresh, DefaultFallbackRefresh)
	def(&c.DispatchFailureLimit, DefaultDispatchFailureLimit)
	batched := c.Store != nil && c.Store.Batched()
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
		if batched {
			c.BatchSize = DefaultBatchedBatchSize
		}
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = DefaultMaxConcurrent
		if batched {
			c.MaxConcurrent = DefaultBatchedMaxConcurrent
		}
	}
	if c.HeartbeatFailures == 0 {
		c.HeartbeatFailures = DefaultHeartbeatFailures
	}
	if c.MaxScheduled == 0 {
		c.MaxScheduled = DefaultMaxScheduled
	}
	if c.OutputLimit == 0 {
		c.OutputLimit = DefaultOutputLimit
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	return c
}

// Validate reports every broken rule, each wrapping sqlease.ErrInvalidConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{sqlease.ErrInvalidConfig}, args...)...))
	}
	if c.Store == nil {
		bad("store is required")
	}
	if c.Holder != "" {
		if err := sqlease.ValidateHolderID(c.Holder); err != nil {
			bad("holder: %v", err)
		}
	}
	for name, d := range map[string]time.Duration{"poll_interval": c.PollInterval, "schedule_refresh_interval": c.RefreshInterval,
		"refresh_overlap": c.RefreshOverlap, "schedule_horizon": c.ScheduleHorizon, "shutdown_timeout": c.ShutdownTimeout,
		"dispatch_failure_limit": c.DispatchFailureLimit} {
		if d <= 0 {
			bad("%s must be positive, got %s", name, d)
		}
	}
	if c.HeartbeatInterval < 0 {
		bad("heartbeat_interval must not be negative, got %s", c.HeartbeatInterval)
	}
	if c.BatchSize < 1 || c.BatchSize > 1000 {
		bad("batch_size must be in [1, 1000], got %d", c.BatchSize)
	}
	if c.MaxConcurrent < 1 {
		bad("max_concurrent must be positive, got %d", c.MaxConcurrent)
	}
	if c.HeartbeatFailures < 1 {
		bad("heartbeat_failures must be positive, got %d", c.HeartbeatFailures)
	}
	if c.MaxScheduled < 1 {
		bad("max_scheduled must be positive, got %d", c.MaxScheduled)
	}
	if c.OutputLimit > MaxOutputLimit {
		bad("output_limit must be at most %d bytes, got %d", MaxOutputLimit, c.OutputLimit)
	}
	return errors.Join(errs...)
}

// Scheduler stores jobs and dispatches their runs.
type Scheduler struct {
	cfg       Config
	store     *sqlstore.Store
	log       *slog.Logger
	sem       chan struct{} // bounds concurrent runs in claim mode
	leaderSem chan struct{} // … and in leader mode

	drainMu  sync.Mutex
	draining bool           // Drain was called: start no new runs
	drained  chan struct{}  // closed by Drain
	inflight sync.WaitGroup // claims in progress and runs executing now

	stateMu   sync.Mutex
	state     DispatchState // leader mode: how Lead is doing
	lastTurn  time.Time     // when Lead's loop last turned
	loopBound time.Duration // a silence longer than this is a stuck loop

	// localWrites: this Scheduler's API wrote a job that may be due
	// (wrote); its claim loop claims at once.
	localWrites chan struct{}

	beats beatGroups // claim mode: the first heartbeat of the runs in flight (exec.go)
}

// DispatchState is how leader-mode dispatch is doing (Scheduler.Dispatch).
type DispatchState struct {
	// Phase is "" when Lead is not running, else "starting" (rebuilding
	// the schedule), "running" or "failing" (rebuilds or refreshes fail;
	// nothing is dispatched until one succeeds).
	Phase string
	// Since is when the phase began (local time).
	Since time.Time
	// Err is the last failure while failing.
	Err error
}

// Phases of DispatchState.
const (
	PhaseStarting = "starting"
	PhaseRunning  = "running"
	PhaseFailing  = "failing"
	// PhaseStuck: running, but the dispatch loop has not turned for twice
	// its refresh period plus 5 s (a statement that hangs): it dispatches
	// nothing.
	PhaseStuck = "stuck"
)

// Dispatch reports how leader-mode dispatch is doing, for readiness: a node
// that leads but does not dispatch must not look ready.
func (s *Scheduler) Dispatch() DispatchState {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	st := s.state
	if st.Phase == PhaseRunning && s.loopBound > 0 && time.Since(s.lastTurn) > s.loopBound {
		st.Phase, st.Since = PhaseStuck, s.lastTurn
		st.Err = fmt.Errorf("the dispatch loop has not turned for %s", time.Since(s.lastTurn).Round(time.Millisecond))
	}
	return st
}

func (s *Scheduler) setLoopBound(d time.Duration) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	s.loopBound, s.lastTurn = d, time.Now()
}

func (s *Scheduler) loopTurned() {
	s.stateMu.Lock()
	s.lastTurn = time.Now()
	s.stateMu.Unlock()
}

func (s *Scheduler) setPhase(phase string, err error) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if s.state.Phase != phase {
		s.state.Since = time.Now()
	}
	s.state.Phase, s.state.Err = phase, err
}

// begin registers a claim about to be made, unless draining. The claim's
// count is held until its runs are registered, so that the WaitGroup never
// goes up from zero while Drain waits on it.
func (s *Scheduler) begin() bool {
	s.drainMu.Lock()
	defer s.drainMu.Unlock()
	if s.draining {
		return false
	}
	s.inflight.Add(1)
	return true
}

// Drain stops this instance from starting new runs and waits until the runs
// in flight have finished or ctx ends (then they are cancelled by whoever
// cancels Run's or Lead's context). A leader that drains keeps its lease —
// and so the fence of its runs — until its elector stops. It returns ctx's
// error if runs were still in flight when ctx ended.
func (s *Scheduler) Drain(ctx context.Context) error {
	s.drainMu.Lock()
	if !s.draining {
		s.draining = true
		close(s.drained)
	}
	s.drainMu.Unlock()
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// New validates cfg and returns a Scheduler.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	leaderSlots := cfg.MaxConcurrent
	if leaderSlots == 0 {
		// Without batches (every dialect but PostgreSQL) leader dispatch
		// starts and finishes each run in a fenced transaction of its own:
		// the batched default would let it hold hundreds of connections.
		// With them (claims of up to 64 jobs per fenced transaction,
		// grouped finishes) a run holds none, and 64 slots halved the
		// throughput of no-op jobs (measured 8.8–11.4k → 20.2k jobs/s).
		leaderSlots = DefaultMaxConcurrent
		if cfg.Store != nil && cfg.Store.Batched() {
			leaderSlots = DefaultBatchedMaxConcurrent
		}
	}
	cfg = cfg.withDefaults()
	return &Scheduler{cfg: cfg, store: cfg.Store, log: cfg.Logger, sem: make(chan struct{}, cfg.MaxConcurrent), drained: make(chan struct{}),
		leaderSem: make(chan struct{}, leaderSlots), localWrites: make(chan struct{}, 1)}, nil
}

// Create stores a new job, validated, with its first occurrence computed from
// the database clock. It is idempotent: creating the same content again under
// the same name (or the same Key) returns the stored job with created=false;
// the same name or key with different content returns an error wrapping
// sqlease.ErrConflict. Invalid jobs return an error wrapping
// sqlease.ErrInvalidConfig or sqlease.ErrInvalidName naming the field, and
// write nothing.
func (s *Scheduler) Create(ctx context.Context, j sqlease.Job) (sqlease.Job, bool, error) {
	j, hash, err := Prepare(j, s.cfg.ValidateAction)
	if err != nil {
		return sqlease.Job{}, false, err
	}
	now, err := s.store.Now(ctx)
	if err != nil {
		return sqlease.Job{}, false, err
	}
	stored, created, err := s.store.InsertJob(ctx, sqlstore.StoredJob{Job: j, SpecHash: hash}, First(j.Schedule, now))
	if err != nil {
		return sqlease.Job{}, false, err
	}
	if created {
		s.wrote()
		return stored.Job, true, nil
	}
	if stored.SpecHash == hash && stored.Name == j.Name {
		return stored.Job, false, nil
	}
	return sqlease.Job{}, false, fmt.Errorf("create job %q: %w: job %q already exists with different content", j.Name, sqlease.ErrConflict, stored.Name)
}

// Created is one job of a CreateMany: as stored, and whether this call
// created it (false: it existed with the same content).
type Created struct {
	Job     sqlease.Job
	Created bool
}

// MaxCreateMany bounds the jobs of one CreateMany.
const MaxCreateMany = 100_000

// CreateMany stores many jobs at once, all or nothing: every job is
// validated before anything is written (an error wrapping
// sqlease.ErrInvalidConfig or sqlease.ErrInvalidName names each invalid one
// by its index, "jobs[3].schedule: …"), then all are written in one
// transaction. Like Create it is idempotent per job: a job whose name (or
// key) exists with the same content is returned with Created false, so a
// retried batch creates only what is missing; one that exists with other
// content fails the whole batch with an error wrapping sqlease.ErrConflict.
// The same job twice in jobs counts once; the same name or key with
// different content is invalid. The result is in the order of jobs.
func (s *Scheduler) CreateMany(ctx context.Context, jobs []sqlease.Job) ([]Created, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	if len(jobs) > MaxCreateMany {
		return nil, fmt.Errorf("%w: jobs: %d jobs, at most %d at once", sqlease.ErrInvalidConfig, len(jobs), MaxCreateMany)
	}
	prepared, index, err := prepareMany(jobs, s.cfg.ValidateAction)
	if err != nil {
		return nil, err
	}
	now, err := s.store.Now(ctx)
	if err != nil {
		return nil, err
	}
	next := make([]time.Time, len(prepared))
	for i, j := range prepared {
		next[i] = First(j.Schedule, now)
	}
	stored, created, err := s.store.InsertJobs(ctx, prepared, next)
	if err != nil {
		return nil, err
	}
	s.wrote()
	out := make([]Created, len(jobs))
	for i, k := range index {
		out[i] = Created{Job: stored[k].Job, Created: created[k]}
	}
	// A job given twice was created once.
	seen := make([]bool, len(prepared))
	for i, k := range index {
		if seen[k] {
			out[i].Created = false
		}
		seen[k] = true
	}
	return out, nil
}

// prepareMany validates jobs and merges repeats: it returns the distinct
// jobs, prepared, and for each of jobs the index of its prepared job.
func prepareMany(jobs []sqlease.Job, validateAction func(json.RawMessage) error) ([]sqlstore.StoredJob, []int, error) {
	var errs []error
	const maxErrs = 20 // a batch of garbage should not make a megabyte of errors
	prepared := make([]sqlstore.StoredJob, 0, len(jobs))
	index := make([]int, len(jobs))
	byName := make(map[string]int, len(jobs))
	byKey := map[string]int{}
	for i, j := range jobs {
		j, hash, err := Prepare(j, validateAction)
		if err != nil {
			if len(errs) < maxErrs {
				errs = append(errs, fmt.Errorf("jobs[%d]: %w", i, err))
			}
			continue
		}
		k, dup := byName[j.Name]
		if !dup && j.Key != "" {
			k, dup = byKey[j.Key]
		}
		if dup {
			if p := prepared[k]; p.SpecHash != hash || p.Name != j.Name || p.Key != j.Key {
				if len(errs) < maxErrs {
					errs = append(errs, fmt.Errorf("jobs[%d]: %w: name %q or key %q is given twice with different content", i, sqlease.ErrInvalidConfig, j.Name, j.Key))
				}
				continue
			}
			index[i] = k
			continue
		}
		index[i] = len(prepared)
		byName[j.Name] = len(prepared)
		if j.Key != "" {
			byKey[j.Key] = len(prepared)
		}
		prepared = append(prepared, sqlstore.StoredJob{Job: j, SpecHash: hash})
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	return prepared, index, nil
}

// Bounds of a job's fields, checked by Prepare (and so by Create,
// CreateMany, the HTTP API and the CLI): each job a listing returns is
// bounded in bytes, so a page of them is too. A longer field is
// ErrInvalidConfig naming it.
const (
	// MaxNameBytes is the longest job name (sqlease.ValidateJobName).
	MaxNameBytes = 128
	// MaxKeyBytes bounds a job's idempotency key.
	MaxKeyBytes = 256
	// MaxCronBytes bounds schedule.cron: every field spelled out as a
	// list ("0,1,2,…,59 0,1,…,23 1,…,31 JAN,…,DEC SUN,…,SAT") is about
	// 390 bytes.
	MaxCronBytes = 512
	// MaxTimezoneBytes bounds schedule.timezone; the longest IANA name
	// has 32 bytes.
	MaxTimezoneBytes = 64
	// MaxActionBytes bounds a job's action (its JSON as stored).
	MaxActionBytes = 64 << 10
	// maxMissedRunsBytes is longer than any missed-runs policy.
	maxMissedRunsBytes = 32
)

// Prepare validates a job for creation, applies the defaults and returns it
// with the hash that identifies its content (for idempotent creation).
// validateAction, if not nil, checks the action. Errors wrap
// sqlease.ErrInvalidConfig or sqlease.ErrInvalidName and name the field.
func Prepare(j sqlease.Job, validateAction func(json.RawMessage) error) (sqlease.Job, string, error) {
	j, err := normalize(j, validateAction)
	if err != nil {
		return sqlease.Job{}, "", err
	}
	hash, err := specHash(j)
	if err != nil {
		return sqlease.Job{}, "", err
	}
	return j, hash, nil
}

// normalize validates j and applies defaults.
func normalize(j sqlease.Job, validateAction func(json.RawMessage) error) (sqlease.Job, error) {
	var errs []error
	// Every string field is bounded before it is parsed or quoted in an
	// error: a listing page holds many jobs, and a 3.9 MiB cron string
	// once passed (issue 30, item 6).
	tooLong := func(field, value string, max int) bool {
		if len(value) <= max {
			return false
		}
		errs = append(errs, fmt.Errorf("%w: %s must be at most %d bytes, got %d", sqlease.ErrInvalidConfig, field, max, len(value)))
		return true
	}
	if len(j.Name) > MaxNameBytes {
		errs = append(errs, fmt.Errorf("%w: name must be 1-%d characters of a-z 0-9 . _ - starting with a letter or digit, got %d bytes",
			sqlease.ErrInvalidName, MaxNameBytes, len(j.Name)))
	} else if err := sqlease.ValidateJobName(j.Name); err != nil {
		errs = append(errs, fmt.Errorf("name: %w", err))
	}
	tooLong("key", j.Key, MaxKeyBytes)
	cron := tooLong("schedule.cron", j.Schedule.Cron, MaxCronBytes)
	tz := tooLong("schedule.timezone", j.Schedule.Timezone, MaxTimezoneBytes)
	if !cron && !tz {
		if err := ValidateSchedule(j.Schedule); err != nil {
			errs = append(errs, err)
		}
	}
	if !tooLong("missed_runs", string(j.MissedRuns), maxMissedRunsBytes) {
		if err := ValidateMissedRuns(j.MissedRuns, j.SkipIfOlderThan); err != nil {
			errs = append(errs, err)
		}
	}
	tooLong("action", string(j.Action), MaxActionBytes)
	if j.MissedRuns == "" {
		j.MissedRuns = sqlease.RunOnce
	}
	if j.Retry.MaxAttempts == 0 {
		j.Retry.MaxAttempts = DefaultMaxAttempts
	}
	if err := ValidateRetry(j.Retry); err != nil {
		errs = append(errs, err)
	}
	if j.LockTimeout == 0 {
		j.LockTimeout = DefaultLockTimeout
	}
	if j.LockTimeout < time.Second || j.LockTimeout > 24*time.Hour {
		errs = append(errs, fmt.Errorf("%w: lock_timeout must be between 1s and 24h, got %s", sqlease.ErrInvalidConfig, j.LockTimeout))
	}
	if len(j.Action) == 0 {
		j.Action = json.RawMessage("{}")
	}
	if err := validateBreaker(&j); err != nil {
		errs = append(errs, err)
	}
	if err := validateOverlap(&j.Schedule); err != nil {
		errs = append(errs, err)
	}
	if validateAction != nil && len(j.Action) <= MaxActionBytes {
		if err := validateAction(j.Action); err != nil {
			errs = append(errs, err)
		}
	}
	return j, errors.Join(errs...)
}

// validateOverlap checks a schedule's overlap policy and stores the default
// as empty, so that a job created with "wait" is the job created without
// it (same row, same content hash as before the policy existed).
func validateOverlap(s *sqlease.Schedule) error {
	if s.MaxConcurrent != 0 && s.Overlap != sqlease.OverlapAllow {
		return fmt.Errorf("%w: max_concurrent bounds the occurrences overlap \"allow\" runs at once: set it only with overlap allow", sqlease.ErrInvalidConfig)
	}
	switch s.Overlap {
	case "", sqlease.OverlapWait:
		s.Overlap = ""
		return nil
	case sqlease.OverlapSkip, sqlease.OverlapCancelRunning, sqlease.OverlapAllow:
		if s.Every == 0 && s.Cron == "" {
			return fmt.Errorf("%w: overlap %q needs a repeating schedule (every or cron): a one-off job has no next occurrence", sqlease.ErrInvalidConfig, s.Overlap)
		}
		if s.Overlap != sqlease.OverlapAllow {
			return nil
		}
		if s.MaxConcurrent < 0 || s.MaxConcurrent > MaxMaxConcurrent {
			return fmt.Errorf("%w: max_concurrent must be between 1 and %d (or absent: no bound), got %d", sqlease.ErrInvalidConfig, MaxMaxConcurrent, s.MaxConcurrent)
		}
		return nil
	}
	if len(s.Overlap) > 64 {
		return fmt.Errorf("%w: overlap must be wait, allow, skip or cancel_running, got %d bytes", sqlease.ErrInvalidConfig, len(s.Overlap))
	}
	return fmt.Errorf("%w: overlap must be wait, allow, skip or cancel_running, got %q", sqlease.ErrInvalidConfig, s.Overlap)
}

// MaxMaxConcurrent is the largest max_concurrent of an overlap allow job.
const MaxMaxConcurrent = 10000

// Bounds of a job's breaker (sqlease.Breaker).
const (
	// MaxBreakerFailures is the largest breaker.failures.
	MaxBreakerFailures = 1000
	// DefaultBreakerCoolDown is breaker.cool_down when it is 0.
	DefaultBreakerCoolDown = time.Minute
	// MinBreakerCoolDown and MaxBreakerCoolDown bound breaker.cool_down.
	MinBreakerCoolDown = time.Second
	MaxBreakerCoolDown = 7 * 24 * time.Hour
)

// validateBreaker checks j's breaker and applies its default cool-down.
func validateBreaker(j *sqlease.Job) error {
	b := &j.Breaker
	if b.IsZero() {
		if b.CoolDown != 0 {
			return fmt.Errorf("%w: breaker.failures must be set (1-%d) with breaker.cool_down", sqlease.ErrInvalidConfig, MaxBreakerFailures)
		}
		return nil
	}
	if b.Failures < 1 || b.Failures > MaxBreakerFailures {
		return fmt.Errorf("%w: breaker.failures must be between 1 and %d, got %d", sqlease.ErrInvalidConfig, MaxBreakerFailures, b.Failures)
	}
	if b.CoolDown == 0 {
		b.CoolDown = DefaultBreakerCoolDown
	}
	if b.CoolDown < MinBreakerCoolDown || b.CoolDown > MaxBreakerCoolDown {
		return fmt.Errorf("%w: breaker.cool_down must be between %s and %s, got %s", sqlease.ErrInvalidConfig, MinBreakerCoolDown, MaxBreakerCoolDown, b.CoolDown)
	}
	if j.Schedule.Every == 0 && j.Schedule.Cron == "" {
		return fmt.Errorf("%w: breaker needs a repeating schedule (every or cron): a one-off job has no further occurrences to skip", sqlease.ErrInvalidConfig)
	}
	return nil
}

// specHash identifies the content of a creation request.
func specHash(j sqlease.Job) (string, error) {
	var action any
	if err := json.Unmarshal(j.Action, &action); err != nil {
		return "", fmt.Errorf("%w: action is not valid JSON: %v", sqlease.ErrInvalidConfig, err)
	}
	var breaker *sqlease.Breaker
	if !j.Breaker.IsZero() {
		breaker = &j.Breaker
	}
	b, err := json.Marshal(struct {
		Name, Key       string
		Schedule        sqlease.Schedule
		Action          any
		MissedRuns      sqlease.MissedRuns
		SkipIfOlderThan time.Duration
		Retry           sqlease.Retry
		LockTimeout     time.Duration
		Paused          bool
		// Only when set, so that the hash of a job without one is what
		// earlier versions stored (an identical create stays a 200).
		Breaker *sqlease.Breaker `json:",omitempty"`
	}{j.Name, j.Key, j.Schedule, action, j.MissedRuns, j.SkipIfOlderThan, j.Retry, j.LockTimeout, j.Paused, breaker})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Now returns the database clock: the time a job's breaker state is
// judged by (sqlease.Job.BreakerState).
func (s *Scheduler) Now(ctx context.Context) (time.Time, error) { return s.store.Now(ctx) }

// Job returns a job by name, or an error wrapping sqlease.ErrNoJob.
func (s *Scheduler) Job(ctx context.Context, name string) (sqlease.Job, error) {
	j, err := s.store.Job(ctx, name)
	return j.Job, err
}

// Jobs lists up to limit jobs whose names sort after `after`.
func (s *Scheduler) Jobs(ctx context.Context, after string, limit int) ([]sqlease.Job, error) {
	rows, err := s.store.Jobs(ctx, after, limit)
	out := make([]sqlease.Job, len(rows))
	for i := range rows {
		out[i] = rows[i].Job
	}
	return out, err
}

// JobsChecked is Jobs that skips rows it cannot decode, returning them
// apart, with the name of the last row read (the next page's cursor).
func (s *Scheduler) JobsChecked(ctx context.Context, after string, limit int) ([]sqlease.Job, []sqlstore.CorruptRow, string, error) {
	rows, skipped, last, err := s.store.JobsChecked(ctx, after, limit)
	out := make([]sqlease.Job, len(rows))
	for i := range rows {
		out[i] = rows[i].Job
	}
	return out, skipped, last, err
}

// Delete deletes a job and its runs' output; its run ledger stays.
func (s *Scheduler) Delete(ctx context.Context, name string) error {
	return s.store.DeleteJob(ctx, name)
}

// Pause stops new runs of a job (a run in flight finishes).
func (s *Scheduler) Pause(ctx context.Context, name string) (sqlease.Job, error) {
	return s.PauseWithReason(ctx, name, "")
}

// MaxPauseReasonBytes bounds the reason of a pause.
const MaxPauseReasonBytes = 512

// PauseWithReason is Pause that stores why (empty: no reason) with the job
// (sqlease.Job.PauseReason) until it is resumed; pausing a paused job
// replaces its reason. A reason longer than MaxPauseReasonBytes is an error
// wrapping sqlease.ErrInvalidConfig.
func (s *Scheduler) PauseWithReason(ctx context.Context, name, reason string) (sqlease.Job, error) {
	if err := validateReason(reason); err != nil {
		return sqlease.Job{}, err
	}
	j, err := s.store.SetPaused(ctx, name, true, reason)
	return j.Job, err
}

// Resume lets a paused job run again and clears its pause reason;
// occurrences missed while paused follow its missed-runs policy.
func (s *Scheduler) Resume(ctx context.Context, name string) (sqlease.Job, error) {
	j, err := s.store.SetPaused(ctx, name, false, "")
	if err == nil {
		s.wrote()
	}
	return j.Job, err
}

// PausePrefix pauses, with reason (empty: none), every job whose name
// starts with prefix — "" is every job — in one statement: all or none.
// It returns how many jobs matched (paused ones too: their reason is
// replaced). An invalid prefix (not a beginning of a job name) or reason
// is an error wrapping sqlease.ErrInvalidConfig.
func (s *Scheduler) PausePrefix(ctx context.Context, prefix, reason string) (int64, error) {
	if err := errors.Join(ValidatePrefix(prefix), validateReason(reason)); err != nil {
		return 0, err
	}
	return s.store.SetPausedPrefix(ctx, prefix, true, reason)
}

// ResumePrefix resumes every job whose name starts with prefix ("" is
// every job), all or none, and returns how many matched.
func (s *Scheduler) ResumePrefix(ctx context.Context, prefix string) (int64, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return 0, err
	}
	n, err := s.store.SetPausedPrefix(ctx, prefix, false, "")
	if err == nil && n > 0 {
		s.wrote()
	}
	return n, err
}

// ValidatePrefix returns an error wrapping sqlease.ErrInvalidConfig unless
// prefix can begin a job name: empty, or at most MaxNameBytes characters
// of a-z 0-9 . _ - starting with a letter or digit.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if len(prefix) > MaxNameBytes || sqlease.ValidateJobName(prefix) != nil {
		return fmt.Errorf("%w: prefix must be empty or the beginning of a job name (1-%d characters of a-z 0-9 . _ - starting with a letter or digit)",
			sqlease.ErrInvalidConfig, MaxNameBytes)
	}
	return nil
}

func validateReason(reason string) error {
	if len(reason) > MaxPauseReasonBytes {
		return fmt.Errorf("%w: reason must be at most %d bytes, got %d", sqlease.ErrInvalidConfig, MaxPauseReasonBytes, len(reason))
	}
	return nil
}

// Trigger makes a job due now, once. A regular occurrence still to come
// stays where it is: the triggered run, once done, leaves the job there
// (sqlease.Job.RegularNextAt), so an every job keeps its phase; a one-off
// job triggered before its time has run once and is done. A job already
// due runs its due occurrence (a retry waiting for its backoff runs now).
// A paused or running job is not changed: an error wrapping
// sqlease.ErrConflict that names the state.
func (s *Scheduler) Trigger(ctx context.Context, name string) (sqlease.Job, error) {
	j, err := s.store.Trigger(ctx, name)
	if err == nil {
		s.wrote()
	}
	return j.Job, err
}

// Runs returns a job's runs, newest first.
func (s *Scheduler) Runs(ctx context.Context, name string, limit int) ([]sqlease.Run, error) {
	return s.store.Runs(ctx, name, limit)
}

// RunsBefore lists a job's runs older than (scheduledFor, attempt), newest
// first: the next page of Runs.
func (s *Scheduler) RunsBefore(ctx context.Context, name string, scheduledFor time.Time, attempt, limit int) ([]sqlease.Run, error) {
	return s.store.RunsBefore(ctx, name, scheduledFor, attempt, limit)
}

// prune deletes runs older than RunRetention now and then until ctx ends.
func (s *Scheduler) prune(ctx context.Context) {
	if s.cfg.RunRetention < 0 {
		return
	}
	every := min(max(s.cfg.RunRetention/10, time.Second), 10*time.Minute)
	tick.Every(ctx, every, func() {
		n, err := s.store.PruneRuns(ctx, s.cfg.RunRetention)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("runs_prune_failed", slog.String("error", err.Error()))
		case n > 0:
			s.log.Info("runs_pruned", slog.Int64("deleted", n), slog.Duration("retention", s.cfg.RunRetention))
		}
	})
}
