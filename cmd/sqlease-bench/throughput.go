package main

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// schedTuning are the scheduler.Config fields the flags may set; zero keeps
// the library default.
type schedTuning struct {
	PollInterval  time.Duration
	BatchSize     int
	MaxConcurrent int
}

func (t schedTuning) apply(c *scheduler.Config) {
	c.PollInterval, c.BatchSize, c.MaxConcurrent = t.PollInterval, t.BatchSize, t.MaxConcurrent
}

// runCounter is the no-op handler plus the observer: it counts handler calls
// per job (exactly-once check) and records when each run's finish write
// returned.
type runCounter struct {
	minID    int64
	seen     []atomic.Int32
	calls    atomic.Int64
	finished atomic.Int64
	firstRun atomic.Int64 // unix nanos of the first handler call
	finishAt []int64      // unix nanos, by finish order
	late     []int64      // handler call − scheduled_for, nanos, by job (the first call)
	want     int64
	done     chan struct{}
	once     sync.Once
}

func newRunCounter(minID, maxID int64, want int) *runCounter {
	return &runCounter{minID: minID, seen: make([]atomic.Int32, maxID-minID+1), want: int64(want),
		finishAt: make([]int64, want+1024), late: make([]int64, maxID-minID+1), done: make(chan struct{})}
}

func (c *runCounter) handle(ctx context.Context, r sqlease.Run) error {
	now := time.Now()
	c.firstRun.CompareAndSwap(0, now.UnixNano())
	c.calls.Add(1)
	if i := r.JobID - c.minID; i >= 0 && i < int64(len(c.seen)) {
		if c.seen[i].Add(1) == 1 {
			atomic.StoreInt64(&c.late[i], int64(now.Sub(r.ScheduledFor)))
		}
	}
	return nil
}

// startDelays returns the first calls' delays past scheduled_for, sorted
// (seconds).
func (c *runCounter) startDelays() []float64 {
	var out []float64
	for i := range c.seen {
		if c.seen[i].Load() > 0 {
			out = append(out, time.Duration(atomic.LoadInt64(&c.late[i])).Seconds())
		}
	}
	sort.Float64s(out)
	return out
}

// RunFinished implements scheduler.Observer; it is called after the run's
// finish write returned.
func (c *runCounter) RunFinished(job string, outcome sqlease.Outcome, took time.Duration) {
	n := c.finished.Add(1)
	if n <= int64(len(c.finishAt)) {
		atomic.StoreInt64(&c.finishAt[n-1], time.Now().UnixNano())
	}
	if n >= c.want {
		c.once.Do(func() { close(c.done) })
	}
}

func (c *runCounter) dupsAndMissing() (dups, missing int) {
	for i := range c.seen {
		switch v := c.seen[i].Load(); {
		case v == 0:
			missing++
		case v > 1:
			dups++
		}
	}
	return
}

// longestGap is the longest time between consecutive finishes (a dispatch
// stall shows here).
func (c *runCounter) longestGap(start time.Time) time.Duration {
	n := min(int(c.finished.Load()), len(c.finishAt))
	ts := []int64{start.UnixNano()}
	for i := range n {
		// A slot is written just after its count is taken: a finish still
		// between the two (one racing the last) is not in yet.
		if t := atomic.LoadInt64(&c.finishAt[i]); t != 0 {
			ts = append(ts, t)
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	var g int64
	for i := 1; i < len(ts); i++ {
		g = max(g, ts[i]-ts[i-1])
	}
	return time.Duration(g)
}

// logCounter is a slog.Handler that counts warnings and errors by message
// and signals selected Info messages. Info records are only enabled while
// someone waits for one (so that the per-run Info lines cost what they cost
// with the library's default discarding logger).
type logCounter struct {
	mu     sync.Mutex
	counts map[string]int
	wantMu sync.Mutex
	want   map[string]chan logged
	info   atomic.Bool
	errs   []string
}

func newLogCounter() *logCounter {
	return &logCounter{counts: map[string]int{}, want: map[string]chan logged{}}
}

// logged is a waited-for log record: when, and its attributes.
type logged struct {
	At    time.Time
	Attrs map[string]string
}

// waitFor returns a channel that receives msg's record when it is logged
// (once).
func (h *logCounter) waitFor(msg string) <-chan logged {
	ch := make(chan logged, 1)
	h.wantMu.Lock()
	h.want[msg] = ch
	h.wantMu.Unlock()
	h.info.Store(true)
	return ch
}

func (h *logCounter) Enabled(_ context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || (l >= slog.LevelInfo && h.info.Load())
}

func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	h.wantMu.Lock()
	if ch, ok := h.want[r.Message]; ok {
		l := logged{At: time.Now(), Attrs: map[string]string{}}
		r.Attrs(func(a slog.Attr) bool { l.Attrs[a.Key] = a.Value.String(); return true })
		ch <- l
		delete(h.want, r.Message)
		if len(h.want) == 0 {
			h.info.Store(false)
		}
	}
	h.wantMu.Unlock()
	if r.Level < slog.LevelWarn {
		return nil
	}
	h.mu.Lock()
	h.counts[r.Message]++
	if len(h.errs) < 5 {
		var e string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "error" || a.Key == "sql_error" {
				e = a.Value.String()
			}
			return true
		})
		h.errs = append(h.errs, r.Message+": "+e)
	}
	h.mu.Unlock()
	return nil
}

func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCounter) WithGroup(string) slog.Handler      { return h }

func (h *logCounter) snapshot() (map[string]int, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := map[string]int{}
	for k, v := range h.counts {
		m[k] = v
	}
	return m, append([]string(nil), h.errs...)
}

// throughputResult is one run of the claim or leader dispatch scenario.
type throughputResult struct {
	Background float64 // machine busy share just before the run (others' load)
	Jobs       int
	Done       int64
	Elapsed    time.Duration // dispatch start → last finish write
	PerSec     float64
	FirstRun   time.Duration // dispatch start → first handler call
	Rebuild    time.Duration // leader: Lead start → schedule_rebuilt
	MaxGap     time.Duration
	TimedOut   bool
	CPU        cpuUse
	Calls      int64
	Dups       int
	Missing    int
	DB         dbCheck
	Warnings   map[string]int
	WarnLines  []string
	Server     *pgStats
	PGCPU      *pgCPUUse
	Trace      *traceSnapshot
	Late       []float64 // trickle: each job's start delay past its scheduled_for (seconds), sorted
}

// dbCheck is what the tables say after the run.
type dbCheck struct {
	Runs, DistinctJobs, Succeeded, Unfinished int64
}

func checkTables(ctx context.Context, st *sqlstore.Store) (dbCheck, error) {
	var c dbCheck
	err := st.DB().QueryRowContext(ctx, `SELECT count(*), count(DISTINCT job_id),
	coalesce(sum(CASE WHEN outcome = 'succeeded' THEN 1 ELSE 0 END), 0) FROM `+prefix+`_runs`).
		Scan(&c.Runs, &c.DistinctJobs, &c.Succeeded)
	if err != nil {
		return c, err
	}
	err = st.DB().QueryRowContext(ctx, `SELECT count(*) FROM `+prefix+`_jobs WHERE locked_by IS NOT NULL OR next_run_at IS NOT NULL`).Scan(&c.Unfinished)
	return c, err
}

type throughputOpts struct {
	dialect string
	mode    string // "claim" or "leader"
	workers int    // claim mode: worker schedulers, each with its own pool
	jobs    int
	tuning  schedTuning
	timeout time.Duration
	// trickle, if not zero: the jobs fall due one every trickle, the first
	// trickleAfter after the seed, instead of all being due (trickle.go).
	trickle, trickleAfter time.Duration
}

// runThroughput seeds opts.jobs due one-off jobs and measures how fast they
// are claimed (or dispatched by the leader), run (no-op) and finished.
func runThroughput(ctx context.Context, e *env, o throughputOpts) (throughputResult, error) {
	res := throughputResult{Jobs: o.jobs}
	tg, setup, done, err := e.migrated(ctx, o.dialect)
	if err != nil {
		return res, err
	}
	defer done()
	kind, offset, step := seedDue, time.Duration(0), e.dueSpread
	if o.trickle > 0 {
		kind, offset, step = seedFuture, o.trickleAfter, o.trickle
	}
	minID, maxID, err := seed(ctx, setup, o.dialect, o.jobs, kind, offset, step)
	if err != nil {
		return res, err
	}
	setup.DB().SetMaxIdleConns(1)

	counter := newRunCounter(minID, maxID, o.jobs)
	logs := newLogCounter()
	logger := slog.New(logs)
	var tr *tracer
	var tl *timeline
	handle := counter.handle
	if e.trace || e.timeline != "" {
		tr = newTracer()
	}
	if e.timeline != "" {
		tl = newTimeline(o.dialect)
		tr.onQuery = tl.query
		handle = func(ctx context.Context, r sqlease.Run) error { tl.call(); return counter.handle(ctx, r) }
	}

	n := o.workers
	if o.mode == "leader" {
		n = 1
	}
	stores := make([]*sqlstore.Store, n)
	for i := range stores {
		if stores[i], err = tg.open(tr); err != nil {
			return res, err
		}
	}
	defer func() {
		for _, st := range stores {
			st.DB().Close()
		}
	}()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var start time.Time
	var leadStart atomic.Int64
	rebuilt := make(<-chan logged)
	before := sampleCPU()
	pgCPU := e.pgCPUStart()
	switch o.mode {
	case "claim":
		scheds := make([]*scheduler.Scheduler, n)
		for i := range scheds {
			cfg := scheduler.Config{Store: stores[i], Holder: fmt.Sprintf("worker-%d", i+1), Handler: handle,
				Observer: counter, Logger: logger}
			o.tuning.apply(&cfg)
			if scheds[i], err = scheduler.New(cfg); err != nil {
				return res, err
			}
		}
		start = time.Now()
		for _, s := range scheds {
			wg.Add(1)
			go func() { defer wg.Done(); _ = s.Run(runCtx) }()
		}
	case "leader":
		cfg := scheduler.Config{Store: stores[0], Handler: handle, Observer: counter, Logger: logger}
		o.tuning.apply(&cfg)
		s, err := scheduler.New(cfg)
		if err != nil {
			return res, err
		}
		rebuilt = logs.waitFor("schedule_rebuilt")
		el, err := benchLeader(stores[0], s, logger, &leadStart)
		if err != nil {
			return res, err
		}
		start = time.Now()
		wg.Add(1)
		go func() { defer wg.Done(); _ = el.Run(runCtx) }()
	}

	timeout := time.NewTimer(o.timeout)
	defer timeout.Stop()
	var rebuiltAt time.Time
wait:
	for {
		select {
		case <-counter.done:
			break wait
		case l := <-rebuilt:
			rebuiltAt = l.At
		case <-timeout.C:
			res.TimedOut = true
			break wait
		case <-ctx.Done():
			cancel()
			wg.Wait()
			return res, ctx.Err()
		}
	}
	end := time.Now()
	if res.Done = counter.finished.Load(); res.Done >= int64(o.jobs) {
		// The last finish write returned at the last recorded instant.
		end = time.Unix(0, counter.finishAt[o.jobs-1])
		for _, t := range counter.finishAt[:o.jobs] {
			if t > end.UnixNano() {
				end = time.Unix(0, t)
			}
		}
	}
	after := sampleCPU()
	res.PGCPU = pgCPU()
	res.CPU = cpuBetween(before, after)
	if o.mode == "leader" {
		if ls := leadStart.Load(); ls != 0 {
			start = time.Unix(0, ls) // throughput from Lead start
			if !rebuiltAt.IsZero() {
				res.Rebuild = rebuiltAt.Sub(start)
			}
		}
	}
	res.Elapsed = end.Sub(start)
	if tl != nil {
		path := ""
		if e.timeline != "-" {
			timelineRuns++
			path = fmt.Sprintf("%s.%d", e.timeline, timelineRuns)
		}
		fmt.Printf("  %s, %s mode, %d jobs:\n", o.dialect, o.mode, res.Done)
		tl.report(start, end, path)
	}
	res.PerSec = float64(res.Done) / res.Elapsed.Seconds()
	if o.trickle > 0 {
		res.Late = counter.startDelays()
	}
	if f := counter.firstRun.Load(); f != 0 {
		res.FirstRun = time.Unix(0, f).Sub(start)
	}
	res.MaxGap = counter.longestGap(start)
	cancel()
	wg.Wait()
	res.Calls = counter.calls.Load()
	res.Dups, res.Missing = counter.dupsAndMissing()
	res.Warnings, res.WarnLines = logs.snapshot()
	if res.DB, err = checkTables(ctx, setup); err != nil {
		return res, err
	}
	for _, st := range stores {
		st.DB().Close()
	}
	if tl != nil && o.dialect == "postgres" {
		printHOT(ctx, setup)
	}
	if tr != nil {
		s := tr.snapshot()
		res.Trace = &s
	}
	if o.dialect == "postgres" {
		setup.DB().Close()
		if st, err := e.serverStats(ctx, tg.dbName); err == nil {
			res.Server = &st
		} else {
			fmt.Fprintf(stderr, "  (server statistics unavailable: %v)\n", err)
		}
	}
	return res, nil
}

// timelineRuns numbers the runs whose timeline was written.
var timelineRuns int

// benchLeader is the bench's one leader: an elector (holder bench-leader)
// whose terms run s in leader dispatch; leadStart is set to when the first
// term began (Unix nanoseconds), for the time to the schedule's rebuild.
func benchLeader(st *sqlstore.Store, s *scheduler.Scheduler, logger *slog.Logger, leadStart *atomic.Int64) (*election.Elector, error) {
	var el *election.Elector
	el, err := election.New(election.Config{Store: st, HolderID: "bench-leader", Logger: logger,
		OnStartedLeading: func(ctx context.Context, tok sqlease.Token) {
			leadStart.CompareAndSwap(0, time.Now().UnixNano())
			if err := s.Lead(ctx, el, tok); err != nil && ctx.Err() == nil {
				logger.Error("lead_failed", slog.String("error", err.Error()))
			}
		}})
	return el, err
}
