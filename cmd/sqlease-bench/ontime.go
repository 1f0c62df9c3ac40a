package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// The ontime scenario: jobs due at known instants (-ontime-jobs one-off
// jobs, -ontime-rate a second, the first -ontime-lead after they are
// created), and the delay from each occurrence's scheduled_for to the start
// of its handler, as p50/p99/max: sqlease's claim mode (one worker) and
// leader mode with their defaults — on PostgreSQL with the job change feed
// as `sqlease serve` wires it — and River (cmd/sqlease-bench/river -ontime)
// with its defaults and latency-tuned, on PostgreSQL and SQLite, interleaved
// round by round on fresh databases. Then the backlog drain: a run_all job
// behind by -backlog occurrences, in each dispatch mode.

// delayStats are the start delays of one round.
type delayStats struct {
	p50, p99, max time.Duration
	stalls        string // the late starts' stalls (-ontime-late), or empty
}

func (d delayStats) String() string {
	ms := func(x time.Duration) float64 { return float64(x) / float64(time.Millisecond) }
	return fmt.Sprintf("p50 %7.1f ms  p99 %7.1f ms  max %7.1f ms", ms(d.p50), ms(d.p99), ms(d.max))
}

func statsOf(ds []time.Duration) delayStats {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return delayStats{p50: ds[len(ds)/2], p99: ds[len(ds)*99/100], max: ds[len(ds)-1]}
}

type ontimeOpts struct {
	dialect string
	mode    string // "claim" or "leader"
	jobs    int
	rate    float64
	lead    time.Duration
	timeout time.Duration
	ways    []string      // claim, leader, river-defaults, river-tuned; empty: all
	late    time.Duration // print the stalls behind starts later than this (0: none)
}

// lateStart is a start later than ontimeOpts.late.
type lateStart struct {
	due, start time.Time // scheduled_for, the handler's start (this host's clock)
}

// stallsOf is the late starts of a round grouped into stalls: starts
// whose due times lie within 50 ms of one another's make one stall, shown
// by when its first job was due, how late the latest start came, and how
// many jobs it delayed, and how far into the stream (from t0, the first
// job's due time) it came, so that a stall at the stream's start (a
// wake-up missed) is told from one in its middle. Which statement, fsync
// or pause a stall lines up with is then found by the wall times (e.g.
// beside strace -tt).
func stallsOf(late []lateStart, over time.Duration, t0 time.Time) string {
	if len(late) == 0 {
		return ""
	}
	slices.SortFunc(late, func(a, b lateStart) int { return a.due.Compare(b.due) })
	var b strings.Builder
	fmt.Fprintf(&b, "     starts later than %s: %d, in these stalls (due from, into the stream, worst delay, jobs):", over, len(late))
	for i := 0; i < len(late); {
		j, worst := i, time.Duration(0)
		for ; j < len(late) && late[j].due.Sub(late[max(j-1, i)].due) <= 50*time.Millisecond; j++ {
			worst = max(worst, late[j].start.Sub(late[j].due))
		}
		fmt.Fprintf(&b, " %s +%.3f s %.1f ms %d;", late[i].due.Local().Format("15:04:05.000"), late[i].due.Sub(t0).Seconds(), float64(worst)/float64(time.Millisecond), j-i)
		i = j
	}
	return b.String()
}

// jobsFeed starts PostgreSQL's job change feed as `sqlease serve` does (nil
// elsewhere).
func jobsFeed(ctx context.Context, tg *target) (<-chan struct{}, error) {
	if tg.dialect != "postgres" {
		return nil, nil
	}
	return postgres.ListenJobs(ctx, tg.dsn, prefix, nil)
}

// dispatch runs sqlease in mode on st with h until ctx ends.
func dispatch(ctx context.Context, wg *sync.WaitGroup, st *sqlstore.Store, mode string, changes <-chan struct{}, h scheduler.Handler, obs scheduler.Observer) error {
	cfg := scheduler.Config{Store: st, Holder: "worker-1", Handler: h, Changes: changes, Observer: obs}
	s, err := scheduler.New(cfg)
	if err != nil {
		return err
	}
	if mode == "claim" {
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Run(ctx) }()
		return nil
	}
	var el *election.Elector
	el, err = election.New(election.Config{Store: st, HolderID: "bench-leader",
		OnStartedLeading: func(ctx context.Context, tok sqlease.Token) {
			if err := s.Lead(ctx, el, tok); err != nil && ctx.Err() == nil {
				logf("lead: %v", err)
			}
		}})
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = el.Run(ctx) }()
	return nil
}

// runOntime creates the jobs, starts dispatch and returns the start delays.
func runOntime(ctx context.Context, e *env, o ontimeOpts) (delayStats, error) {
	tg, setup, dropDB, err := e.migrated(ctx, o.dialect)
	if err != nil {
		return delayStats{}, err
	}
	defer dropDB()
	st, err := tg.open(nil)
	if err != nil {
		return delayStats{}, err
	}
	defer st.DB().Close()

	var mu sync.Mutex
	delays := make([]time.Duration, 0, o.jobs)
	var late []lateStart
	done := make(chan struct{})
	handler := func(_ context.Context, r sqlease.Run) error {
		// The database runs on this machine: scheduled_for and the
		// handler's start are read from one clock.
		start := time.Now()
		d := start.Sub(r.ScheduledFor)
		mu.Lock()
		if o.late > 0 && d > o.late {
			late = append(late, lateStart{due: r.ScheduledFor, start: start})
		}
		if delays = append(delays, d); len(delays) == o.jobs {
			close(done)
		}
		mu.Unlock()
		return nil
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	changes, err := jobsFeed(runCtx, tg)
	if err != nil {
		return delayStats{}, err
	}
	// Dispatch starts first and idles, as a running fleet would; then the
	// jobs are created through another node's API.
	if err := dispatch(runCtx, &wg, st, o.mode, changes, handler, nil); err != nil {
		return delayStats{}, err
	}
	api, err := scheduler.New(scheduler.Config{Store: setup})
	if err != nil {
		return delayStats{}, err
	}
	now, err := setup.Now(ctx)
	if err != nil {
		return delayStats{}, err
	}
	t0 := now.Add(o.lead)
	step := time.Duration(float64(time.Second) / o.rate)
	jobs := make([]sqlease.Job, o.jobs)
	for i := range jobs {
		jobs[i] = sqlease.Job{Name: fmt.Sprintf("ontime-%07d", i), Schedule: sqlease.Schedule{At: t0.Add(time.Duration(i) * step)}}
	}
	for lo := 0; lo < len(jobs); lo += 5000 {
		if _, err := api.CreateMany(ctx, jobs[lo:min(lo+5000, len(jobs))]); err != nil {
			return delayStats{}, err
		}
	}
	if n, _ := setup.Now(ctx); n.After(t0) {
		return delayStats{}, fmt.Errorf("creating the jobs took longer than -ontime-lead %s", o.lead)
	}
	select {
	case <-done:
	case <-time.After(o.lead + time.Duration(float64(o.jobs)/o.rate*float64(time.Second)) + o.timeout):
		mu.Lock()
		defer mu.Unlock()
		return delayStats{}, fmt.Errorf("%d of %d jobs started", len(delays), o.jobs)
	case <-ctx.Done():
		return delayStats{}, ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	res := statsOf(delays)
	res.stalls = stallsOf(late, o.late, t0)
	return res, nil
}

// riverWarm is how long River's client runs before the jobs are inserted:
// its leader elected and its maintenance services started, as in a fleet
// that has been running (started together with the insert, its first
// jobs waited about 3 s for them on PostgreSQL).
const riverWarm = 6 * time.Second

// runRiverOntime runs River's on-time mode on a fresh database.
func runRiverOntime(ctx context.Context, e *env, bin, dialect string, o ontimeOpts, tuned bool) (delayStats, error) {
	tg, err := e.newTarget(ctx, dialect)
	if err != nil {
		return delayStats{}, err
	}
	defer tg.cleanup()
	drv := "pgx"
	if dialect == "sqlite" {
		drv = "sqlite"
	}
	args := []string{"-ontime", "-driver", drv, "-db", tg.dsn, "-jobs", fmt.Sprint(o.jobs), "-rate", fmt.Sprint(o.rate), "-lead", o.lead.String(),
		"-warm", riverWarm.String(), "-timeout", (riverWarm + o.lead + time.Duration(float64(o.jobs)/o.rate*float64(time.Second)) + o.timeout).String()}
	if tuned {
		args = append(args, "-tuned")
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return delayStats{}, fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	var res struct {
		P50, P99, Max float64
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		var r struct {
			P50 float64 `json:"p50_ms"`
			P99 float64 `json:"p99_ms"`
			Max float64 `json:"max_ms"`
		}
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Max > 0 {
			res.P50, res.P99, res.Max = r.P50, r.P99, r.Max
		}
	}
	if res.Max == 0 {
		return delayStats{}, fmt.Errorf("River's output %q: no result", out)
	}
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	return delayStats{p50: ms(res.P50), p99: ms(res.P99), max: ms(res.Max)}, nil
}

// backlogCounter counts finished runs and records when the first and the
// n-th finished.
type backlogCounter struct {
	n, want     int64
	first, last atomic.Int64 // unix nanos
	done        chan struct{}
	once        sync.Once
	failures    atomic.Int64
}

func (c *backlogCounter) RunFinished(_ string, outcome sqlease.Outcome, _ time.Duration) {
	if outcome != sqlease.OutcomeSucceeded {
		c.failures.Add(1)
	}
	now := time.Now().UnixNano()
	c.first.CompareAndSwap(0, now)
	if atomic.AddInt64(&c.n, 1) == c.want {
		c.last.Store(now)
		c.once.Do(func() { close(c.done) })
	}
}

// runBacklog: one run_all job every 100 ms (scheduler.MinEvery) whose
// next_run_at is n × 100 ms in the past, as after a pause of that long, and
// a no-op handler: how fast dispatch in mode runs the n occurrences behind.
func runBacklog(ctx context.Context, e *env, dialect, mode string, n int, timeout time.Duration) (float64, error) {
	tg, setup, done, err := e.migrated(ctx, dialect)
	if err != nil {
		return 0, err
	}
	defer done()
	api, err := scheduler.New(scheduler.Config{Store: setup})
	if err != nil {
		return 0, err
	}
	const every = scheduler.MinEvery
	if _, _, err := api.Create(ctx, sqlease.Job{Name: "behind", MissedRuns: sqlease.RunAll, Paused: true, Schedule: sqlease.Schedule{Every: every}}); err != nil {
		return 0, err
	}
	now, err := setup.Now(ctx)
	if err != nil {
		return 0, err
	}
	ph := "?1"
	if dialect == "postgres" {
		ph = "$1"
	}
	var at any = now.Add(-time.Duration(n) * every).UTC()
	if f := setup.Dialect().Time; f != nil {
		at = f(now.Add(-time.Duration(n) * every))
	}
	if _, err := setup.DB().ExecContext(ctx, `UPDATE `+prefix+`_jobs SET next_run_at = `+ph, at); err != nil {
		return 0, err
	}
	st, err := tg.open(nil)
	if err != nil {
		return 0, err
	}
	defer st.DB().Close()
	c := &backlogCounter{want: int64(n), done: make(chan struct{})}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	changes, err := jobsFeed(runCtx, tg)
	if err != nil {
		return 0, err
	}
	if err := dispatch(runCtx, &wg, st, mode, changes, func(context.Context, sqlease.Run) error { return nil }, c); err != nil {
		return 0, err
	}
	time.Sleep(500 * time.Millisecond) // dispatch up and idle (the leader elected, its schedule built)
	if _, err := api.Resume(ctx, "behind"); err != nil {
		return 0, err
	}
	select {
	case <-c.done:
	case <-time.After(timeout):
		return 0, fmt.Errorf("%d of %d occurrences in %s", atomic.LoadInt64(&c.n), n, timeout)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if f := c.failures.Load(); f > 0 {
		return 0, fmt.Errorf("%d runs did not succeed", f)
	}
	// From the first finish to the n-th: how dispatch hears of the resume
	// (a change notification, a poll or a refresh, up to a second) is not
	// the drain's speed.
	return float64(n-1) / time.Duration(c.last.Load()-c.first.Load()).Seconds(), nil
}

// ontimeScenario runs the rounds and prints the tables.
func ontimeScenario(ctx context.Context, e *env, dialect string, o ontimeOpts, backlog, runs int, timeout time.Duration) bool {
	o.dialect = dialect
	fmt.Printf("\n== on time — %s, %d one-off no-op jobs due at %.0f/s from %s after their creation, interleaved rounds on fresh databases\n", dialect, o.jobs, o.rate, o.lead)
	fmt.Printf("   start delay = handler (River: Work) start − scheduled_for, one clock (the database runs on this machine)\n")
	fmt.Printf("   sqlease: scheduler.Config defaults (PollInterval 1 s), one worker / one leader (election defaults)%s; jobs created with CreateMany through another pool while dispatch idles\n",
		map[bool]string{true: ", the job change feed (postgres.ListenJobs) as sqlease serve wires it", false: ""}[dialect == "postgres"])
	if dialect != "mysql" {
		fmt.Printf("   River v0.51.1: InsertMany with InsertOpts.ScheduledAt into a client started %s before%s; defaults: MaxWorkers 100, FetchCooldown 100 ms, FetchPollInterval 1 s; latency-tuned: FetchCooldown 1 ms, FetchPollInterval 10 ms; its job scheduler makes the jobs due within its next 5 s available ahead of time, and producers fetch the due ones by FetchPollInterval polls and LISTEN/NOTIFY\n",
			riverWarm, map[bool]string{true: " (riversqlite, one connection as its documentation asks)", false: ""}[dialect == "sqlite"])
	}
	needRiver := dialect != "mysql" && (len(o.ways) == 0 || slices.ContainsFunc(o.ways, func(w string) bool { return strings.HasPrefix(w, "river") }))
	bin, cleanup, err := "", func() {}, error(nil)
	if needRiver {
		bin, cleanup, err = buildRiver(ctx)
	}
	if err != nil {
		fmt.Printf("  ERROR building River: %v\n", err)
		exitCode = 1
		bin = ""
	} else {
		defer cleanup()
	}
	type way struct {
		name string
		run  func() (delayStats, error)
	}
	ways := []way{
		{"sqlease claim", func() (delayStats, error) { oo := o; oo.mode = "claim"; return runOntime(ctx, e, oo) }},
		{"sqlease leader", func() (delayStats, error) { oo := o; oo.mode = "leader"; return runOntime(ctx, e, oo) }},
	}
	if bin != "" {
		ways = append(ways,
			way{"River defaults", func() (delayStats, error) { return runRiverOntime(ctx, e, bin, dialect, o, false) }},
			way{"River tuned", func() (delayStats, error) { return runRiverOntime(ctx, e, bin, dialect, o, true) }})
	}
	if len(o.ways) > 0 {
		var keep []way
		for _, w := range ways {
			if slices.Contains(o.ways, strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(w.name, "sqlease "), " ", "-"))) {
				keep = append(keep, w)
			}
		}
		ways = keep
	}
	got := make([][]delayStats, len(ways))
	for r := 1; r <= runs; r++ {
		for i, w := range ways {
			if ctx.Err() != nil {
				return false
			}
			bg := settle(e.settleBusy, e.settleWait)
			d, err := w.run()
			if err != nil {
				fmt.Printf("  run %d, %s: ERROR %v\n", r, w.name, err)
				exitCode = 1
				continue
			}
			got[i] = append(got[i], d)
			fmt.Printf("  run %d: %-15s %s  [bg %2.0f%%]\n", r, w.name, d, bg*100)
			if d.stalls != "" {
				fmt.Println(d.stalls)
			}
		}
	}
	fmt.Printf("  medians of %d rounds (each percentile's median over the rounds):\n", runs)
	for i, w := range ways {
		if len(got[i]) == 0 {
			continue
		}
		var p50, p99, mx []float64
		for _, d := range got[i] {
			p50, p99, mx = append(p50, float64(d.p50)), append(p99, float64(d.p99)), append(mx, float64(d.max))
		}
		med := delayStats{p50: time.Duration(medianOf(p50)), p99: time.Duration(medianOf(p99)), max: time.Duration(medianOf(mx))}
		fmt.Printf("    %-15s %s\n", w.name, med)
	}
	if backlog <= 0 {
		return true
	}
	fmt.Printf("\n== backlog drain — %s, one run_all job every %s, %d occurrences behind (a pause of %s, then Resume), no-op handler, defaults; occurrences/s from the first run's finish to the last's\n",
		dialect, scheduler.MinEvery, backlog, time.Duration(backlog)*scheduler.MinEvery)
	// -ontime-ways backlog-claim or backlog-leader runs the drain in that
	// mode only (the on-time ways name none of these); else both.
	modes := []string{"claim", "leader"}
	if m := slices.DeleteFunc(slices.Clone(o.ways), func(w string) bool { return !strings.HasPrefix(w, "backlog-") }); len(m) > 0 {
		modes = modes[:0]
		for _, w := range m {
			modes = append(modes, strings.TrimPrefix(w, "backlog-"))
		}
	}
	for _, mode := range modes {
		var rates []float64
		for r := 1; r <= runs; r++ {
			if ctx.Err() != nil {
				return false
			}
			bg := settle(e.settleBusy, e.settleWait)
			rate, err := runBacklog(ctx, e, dialect, mode, backlog, timeout)
			if err != nil {
				if errors.Is(err, context.Canceled) {
					return false
				}
				fmt.Printf("  run %d, %s: ERROR %v\n", r, mode, err)
				exitCode = 1
				continue
			}
			rates = append(rates, rate)
			fmt.Printf("  run %d: %-7s %7.0f occurrences/s  [bg %2.0f%%]\n", r, mode, rate, bg*100)
		}
		if len(rates) > 0 {
			fmt.Printf("    median %-7s %7.0f occurrences/s\n", mode, medianOf(rates))
		}
	}
	return true
}
