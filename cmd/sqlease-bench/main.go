// Command sqlease-bench measures the scheduler on PostgreSQL and SQLite:
// claim-mode throughput, submit latency, leader-mode throughput and the
// leader's memory bound. Run it with -help for the details.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	rtrace "runtime/trace"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sqlease/sqlease/internal/mysqltest"
	"github.com/sqlease/sqlease/sqlstore"
)

const usage = `sqlease-bench measures the sqlease scheduler on PostgreSQL and SQLite.

USAGE
  go run ./cmd/sqlease-bench [flags]
  go build -o sqlease-bench ./cmd/sqlease-bench && ./sqlease-bench [flags]

Every scenario runs -runs times, each time on a fresh database (a new
PostgreSQL database, dropped afterwards; a new SQLite file in a temp
directory), and prints every run, then the median with [min .. max, ±half
the relative spread]. Jobs are one-off no-op jobs whose rows are exactly what
scheduler.Create writes: one job is created through Create and copied N times
with one INSERT … SELECT (generate_series on PostgreSQL, a recursive CTE on
SQLite); PostgreSQL tables are then ANALYZEd.

SCENARIOS (-bench, comma-separated; default claim,submit,leader,memory)
  claim   Claim-mode throughput. N due jobs (-jobs), W worker schedulers
          (-workers, e.g. 1,4), each with its own *sql.DB pool as separate
          processes would have, scheduler.Config defaults unless -poll,
          -batch or -max-concurrent say otherwise. Measured from the moment
          the workers start to the return of the last run's finish write
          (scheduler.Observer.RunFinished), in jobs/s. Checks exactly-once:
          handler calls per job, run rows, jobs left locked or pending.
  submit  scheduler.Create latency for one-off jobs: -submits creates from
          each of -submitters concurrent goroutines settings (e.g. 1,8)
          sharing one scheduler and pool (an API server); p50/p99 per run.
  leader  Leader-mode throughput: an election.Elector (defaults) whose
          OnStartedLeading calls scheduler.Lead, over -leader-jobs due jobs;
          measured from Lead start to the last finish write.
  memory  The leader's memory bound: -memory-jobs (1,000,000) pending one-off
          jobs due -memory-offset after the insert, spread over
          -memory-spread, all inside the schedule horizon (-memory-horizon,
          so that the window is bounded by MaxScheduled = 10,000 alone).
          Reports the insert time, the full rebuild (Lead start until the
          "schedule_rebuilt" log event), the process RSS (VmRSS after
          runtime.GC + debug.FreeOSMemory) and Go heap before the elector
          starts, after the rebuild and after -memory-refreshes refreshes,
          VmHWM, how long each refresh (the run of Changed pages ending in a
          short page) and each reload (DueWindow) took, and the query plan
          of a refresh page with its cursor in the middle of the table. Each
          run is a child process of its own, so VmHWM is its alone.
  singletons  Idle singletons (issue 32): -singleton-nodes library nodes
          (election defaults, a pool each, the lease change feed on
          PostgreSQL) register the same -singletons singletons whose bodies
          only wait; once all run and no node is above its fair share,
          statements are counted for -singleton-window: server-side
          (pg_stat_statements, BEGIN/COMMIT included) on PostgreSQL,
          client-side (a connector wrapper) everywhere; and terms lost
          (bodies stopped) in the window. -singleton-modes lease,advisory.
          Example: -bench singletons -singletons 1000 -singleton-nodes 3
  protocol  Placement by node's protocol (model/assign.pml) run by
          -singleton-nodes bench nodes directly on the store's statements
          (the singleton package runs them, with bodies) over -singletons
          singletons: idle statements/s (server-counted), the time from a
          dead node's last renew until all its singletons are on live
          nodes, and a joining node's time to its share and moves.
  placement  The statements of placement by node (issue 32,
          sqlstore/placement.go) at scale: -placement-singletons rows, one
          statement placing all on a node, the Placement and Assigned reads,
          SaveAssigned, one statement reassigning all of a dead node's, a
          give of a third; wall-clock round trips from this process.
  bulk    Creating -bulk-jobs one-off jobs: one Create per job from 32
          goroutines, CreateMany in batches of -bulk-batch from 1 and 4
          callers, POST /v1/jobs:batch from 4 HTTP clients; jobs/s and the
          ratio to one Create per job.
  peer    PostgreSQL and SQLite: sqlease claim and leader mode against
          River (cmd/sqlease-bench/river, built with go build; riversqlite on
          SQLite), tuned and with its defaults, -peer-jobs due no-op jobs each, interleaved round by
          round; each figure as the median of the rounds' ratios to River
          tuned, with their range.
  trickle A steady trickle, not a backlog: -trickle-jobs one-off no-op
          jobs fall due one every 1/-trickle-rate s; claim (1 worker) and
          leader mode in interleaved rounds; CPU per job (client, server)
          over the run, idle time included, and the machine's utilization.
  daemon  Real "sqlease serve" nodes (-daemon-nodes; on SQLite all on one
          file) deliver -daemon-jobs one-off HTTP jobs, all due at one
          instant, to a receiver in this process, --dispatch leader and
          claim: deliveries/s from the due instant to the last arrival,
          p50/p99 from scheduled_for to arrival, every job exactly once.
          Also with -dialects mysql: a MySQL or MariaDB server at
          -mysql-db or $SQLEASE_TEST_MYSQL_URL (else a private MariaDB), a
          fresh database per run; the database's CPU is not measured there.
          SQLEASE_BENCH_NODE_PROFILE=DIR: each node writes a CPU profile
          of its life into DIR (go tool pprof -ignore createJobs).
          SQLEASE_BENCH_SQLEASE_BIN: run this sqlease binary instead of
          building one (before/after rounds of two commits);
          SQLEASE_BENCH_DAEMON_DISPATCH=claim (or leader): that mode only.
  ontime  Jobs due at known times: -ontime-jobs one-off no-op jobs due at
          -ontime-rate a second, the first -ontime-lead after they are
          created (CreateMany through another pool, dispatch already
          running and idle); p50/p99/max of the delay from scheduled_for to
          the handler's start, for sqlease claim (one worker) and leader
          mode with their defaults (PostgreSQL: with the job change feed, as
          sqlease serve wires it) and River v0.51.1 (cmd/sqlease-bench/river
          -ontime: InsertOpts.ScheduledAt) with its defaults and
          latency-tuned, interleaved round by round; medians of the rounds.
          Then the backlog drain: one run_all job every 100 ms behind by
          -backlog occurrences (a pause, then Resume), in both dispatch
          modes: occurrences/s until the backlog is run.

WHAT ELSE IS REPORTED
  cpu     machine utilization over the run (/proc/stat, all cores), the
          CPU of this process (the Go client: scheduler, database/sql, the
          driver; getrusage) and the rest (≈ the database server when it
          runs on this machine), per job.
  server  PostgreSQL only: transactions (pg_stat_database.xact_commit),
          connections opened (pg_stat_database.sessions) and, when
          pg_stat_statements is loaded, calls and execution time per
          statement, per job. Statements are named after the fields of
          sqlstore.JobQueries / sqlstore.Queries.
  postgres CPU  when the server runs on this machine, the CPU of its
          processes (the postmaster's children from /proc, by kind: client
          backends, autovacuum, background, exited), per job.
  [bg N%] the machine's busy share in the second before the run. Other
          people's builds and tests may share the machine: before each run
          the bench waits (-settle-wait) for a second at most -settle-busy
          busy, and prints what it got; distrust runs with a high [bg].
  -trace  client side, every dialect: a database/sql connector wrapper
          counts statements, rows, round-trip time, transactions and
          physical connections per pool. Off by default so that the timed
          runs use exactly the library's drivers.
  -timeline  claim and leader runs (and the peer's): each dispatch
          statement's start, end and rows and each handler call, then the
          run's wall time by what was in flight (claim, finish, both,
          nothing) and the handlers' waits; on PostgreSQL each table's
          inserts, updates and HOT updates. -timeline FILE also writes the
          events of the Nth such run as CSV to FILE.N. Wraps the driver, as
          -trace does.

POSTGRESQL
  The server is -db, else $SQLEASE_TEST_POSTGRES_URL, else a private
  throwaway PostgreSQL 15 started through internal/pgtest (initdb into
  /dev/shm, fsync/full_page_writes/synchronous_commit off, max_connections
  200, pg_stat_statements preloaded; the settings of scripts/test.sh and of
  the pgbench figures in ENVIRONMENT.md), stopped and removed on exit. The
  role must be allowed to CREATE DATABASE. Binaries: /usr/lib/postgresql/15/bin
  or $SQLEASE_TEST_PG_BIN. -dialects sqlite needs no server.

EXAMPLES
  # everything, 5 runs each, private PostgreSQL:
  go run ./cmd/sqlease-bench
  # claim throughput only, PostgreSQL, 1 and 4 workers, statement counts:
  go run ./cmd/sqlease-bench -bench claim -dialects postgres -workers 1,4 -trace
  # the same with a shorter poll interval and a pool that keeps its connections:
  go run ./cmd/sqlease-bench -bench claim -poll 10ms -max-idle 100
  # submit latency against an existing server:
  SQLEASE_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable \
    go run ./cmd/sqlease-bench -bench submit -submitters 1,8
  # the memory bound, 3 runs:
  go run ./cmd/sqlease-bench -bench memory -memory-runs 3
  # a CPU profile of the client side (go tool pprof -top cpu.out):
  go run ./cmd/sqlease-bench -bench claim -runs 1 -cpuprofile cpu.out
  # Go benchmarks for go test -cpuprofile (see scheduler/bench_test.go):
  go test -run '^$' -bench ClaimThroughput -benchtime 20000x -cpuprofile cpu.out ./scheduler

FLAGS
`

var (
	stderr   io.Writer = os.Stderr
	verbose  bool
	exitCode int
)

func logf(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }

type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	*l = nil
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("want positive integers separated by commas, got %q", v)
		}
		*l = append(*l, n)
	}
	return nil
}

func main() {
	fs := flag.NewFlagSet("sqlease-bench", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	var (
		benches     = fs.String("bench", "claim,submit,leader,memory", "scenarios to run: claim, submit, leader, memory, bulk, peer, daemon, ontime, trickle, singletons, placement, protocol (comma-separated; all = every one but bulk, peer, daemon, ontime, trickle, singletons, placement and protocol)")
		dialects    = fs.String("dialects", "postgres,sqlite", "databases to benchmark: postgres, sqlite, mysql (MySQL/MariaDB: the daemon, singletons and ontime scenarios; comma-separated)")
		mysqlDB     = fs.String("mysql-db", "", "-dialects mysql: mysql:// URL of a user that may CREATE DATABASE (default $SQLEASE_TEST_MYSQL_URL, else a private MariaDB)")
		dbURL       = fs.String("db", "", "PostgreSQL URL of a role that may CREATE DATABASE (default $SQLEASE_TEST_POSTGRES_URL, else a private server)")
		runs        = fs.Int("runs", 5, "repetitions of each measurement (medians are reported)")
		jobs        = fs.Int("jobs", 20000, "claim: due one-off jobs per run")
		leaderJobs  = fs.Int("leader-jobs", 20000, "leader: due one-off jobs per run")
		daemonJobs  = fs.Int("daemon-jobs", 20000, "daemon: HTTP jobs per run")
		daemonNodes = fs.Int("daemon-nodes", 1, "daemon: sqlease serve nodes")
		peerJobs    = fs.Int("peer-jobs", 20000, "peer: due no-op jobs per run and way")
		ontimeJobs  = fs.Int("ontime-jobs", 5000, "ontime: one-off jobs per run and way")
		ontimeRate  = fs.Float64("ontime-rate", 1000, "ontime: jobs due per second")
		ontimeLead  = fs.Duration("ontime-lead", 3*time.Second, "ontime: the first job is due this long after the jobs are created")
		backlog     = fs.Int("backlog", 6000, "ontime: occurrences behind in the backlog drain (0: skip it)")
		ontimeWays  = fs.String("ontime-ways", "", "ontime: the ways to run, comma-separated: claim, leader, river-defaults, river-tuned (default: all)")
		ontimeLate  = fs.Duration("ontime-late", 0, "ontime: after each sqlease round, print the stalls behind its starts later than this (wall times, to line them up with statements or fsyncs; 0: none)")
		trickleJobs = fs.Int("trickle-jobs", 10000, "trickle: jobs per run and mode")
		trickleRate = fs.Float64("trickle-rate", 1000, "trickle: jobs falling due per second")
		trickleMode = fs.String("trickle-modes", "claim,leader", "trickle: the modes to run, comma-separated: claim, leader (one alone, for a -cpuprofile of it)")
		peerDefault = fs.Bool("peer-river-defaults", true, "peer: also run River with its defaults (about 1,000 jobs/s whatever the count: 100 s a round at -peer-jobs 100000)")
		bulkJobs    = fs.Int("bulk-jobs", 50000, "bulk: jobs created per run and way")
		bulkBatch   = fs.Int("bulk-batch", 5000, "bulk: jobs per CreateMany call and per POST /v1/jobs:batch")
		workers     = intList{1, 4}
		submits     = fs.Int("submits", 2000, "submit: creates per run")
		submitters  = intList{1, 8}
		poll        = fs.Duration("poll", 0, "scheduler PollInterval (0: the default, 1s)")
		batch       = fs.Int("batch", 0, "scheduler BatchSize (0: the default: 256 on PostgreSQL, whose store batches, else 32)")
		maxConc     = fs.Int("max-concurrent", 0, "scheduler MaxConcurrent (0: the default: 512 on PostgreSQL, SQLite and MySQL, else 64)")
		maxIdle     = fs.Int("max-idle", -1, "sql.DB SetMaxIdleConns for every pool (-1: what the dialect's Open sets)")
		maxOpen     = fs.Int("max-open", 0, "sql.DB SetMaxOpenConns for every pool (0: unlimited, the default)")
		trace       = fs.Bool("trace", false, "count statements, rows, transactions and connections client-side (wraps the driver)")
		timelineOut = fs.String("timeline", "", "claim/leader/peer: record each dispatch statement's start, end and rows and each handler call (wraps the driver) and print where the run's wall time went; \"-\": print only, else also write the events of run N as CSV to FILE.N")
		timeout     = fs.Duration("timeout", 10*time.Minute, "give up on a throughput run after this long")
		settleBusy  = fs.Float64("settle-busy", 0.10, "before each run, wait for a 1s window with the machine at most this busy (0..1; other processes' load)")
		settleWait  = fs.Duration("settle-wait", time.Minute, "… but for at most this long (0: do not wait; the background load is still measured and printed as [bg N%])")
		memJobs     = fs.Int("memory-jobs", 1_000_000, "memory: pending future jobs")
		memRuns     = fs.Int("memory-runs", 3, "memory: repetitions (each inserts -memory-jobs rows)")
		memHorizon  = fs.Duration("memory-horizon", 10*time.Minute, "memory: scheduler ScheduleHorizon (must exceed -memory-offset so the window fills)")
		memOffset   = fs.Duration("memory-offset", 5*time.Minute, "memory: first job due this long after the insert")
		memSpread   = fs.Duration("memory-spread", time.Minute, "memory: jobs spread evenly over this span")
		memWait     = fs.Duration("memory-wait", 150*time.Second, "memory: run the leader at most this long after the rebuild (must end before the jobs fall due)")
		memRefresh  = fs.Int("memory-refreshes", 5, "memory: stop after this many completed refreshes")
		sqliteDir   = fs.String("sqlite-dir", "", "directory for the SQLite files (default: the system temp directory)")
		dueSpread   = fs.Duration("due-spread", time.Millisecond, "claim/leader: space the due jobs' next_run_at this far apart, into the past (0: all due at one instant — with more than MaxScheduled of them the leader dispatches none)")
		noNotify    = fs.Bool("no-notify-trigger", false, "PostgreSQL: drop the jobs table's NOTIFY trigger (the leader's change feed) after migrating, to measure what it costs")
		cpuprofile  = fs.String("cpuprofile", "", "write a CPU profile of this process (the Go client) to this file")
		exectrace   = fs.String("exectrace", "", "write a Go execution trace of this process (the Go client) to this file: which goroutine woke which, for go tool trace")
		childMem    = fs.String("child-memory", "", "internal: run one memory run for this dialect and print JSON")
		singletonsN = intList{1000}
		sNodes      = intList{3}
		sModes      = fs.String("singleton-modes", "lease", "singletons: election modes, lease and/or advisory (a session per node for its member lease, and one per other live node waited on)")
		sWindow     = fs.Duration("singleton-window", 20*time.Second, "singletons: how long statements are counted once the fleet has settled")
		sSettle     = fs.Duration("singleton-settle", 3*time.Minute, "singletons: give up when the fleet has not settled after this long")
	)
	placementN := intList{10000}
	fs.Var(&placementN, "placement-singletons", "placement: singleton counts (comma-separated)")
	fs.Var(&singletonsN, "singletons", "singletons: singleton counts to measure (comma-separated)")
	fs.Var(&sNodes, "singleton-nodes", "singletons: node counts to measure (comma-separated)")
	fs.Var(&workers, "workers", "claim: worker-scheduler counts to measure (comma-separated)")
	fs.Var(&submitters, "submitters", "submit: concurrent submitter counts to measure (comma-separated)")
	fs.BoolVar(&verbose, "v", false, "verbose: log progress details")
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fs.Usage()
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	e := &env{sqliteDir: *sqliteDir, maxIdle: *maxIdle, maxOpen: *maxOpen, trace: *trace, timeline: *timelineOut, verbose: verbose,
		settleBusy: *settleBusy, settleWait: *settleWait, dropNotify: *noNotify, dueSpread: *dueSpread, mysqlURL: mysqlURL(*mysqlDB)}
	memOpts := memoryOpts{Jobs: *memJobs, Horizon: *memHorizon, Offset: *memOffset, Spread: *memSpread,
		Wait: *memWait, Refreshes: *memRefresh}

	if *childMem != "" {
		e.pgURL = *dbURL
		if e.pgURL != "" {
			e.postmaster = findPostmaster(ctx, e.pgURL)
		}
		memOpts.Dialect = *childMem
		if err := childMemory(ctx, e, memOpts); err != nil {
			fmt.Fprintf(os.Stderr, "sqlease-bench (memory child): %v\n", err)
			os.Exit(1)
		}
		return
	}

	want := map[string]bool{}
	for _, b := range strings.Split(*benches, ",") {
		b = strings.TrimSpace(b)
		switch b {
		case "claim", "submit", "leader", "memory", "bulk", "peer", "daemon", "ontime", "trickle", "singletons", "placement", "protocol":
			want[b] = true
		case "all":
			want["claim"], want["submit"], want["leader"], want["memory"] = true, true, true, true
		default:
			fmt.Fprintf(os.Stderr, "unknown scenario %q in -bench\n", b)
			os.Exit(2)
		}
	}
	var dls []string
	for _, d := range strings.Split(*dialects, ",") {
		d = strings.TrimSpace(d)
		if d != "postgres" && d != "sqlite" && d != "mysql" {
			fmt.Fprintf(os.Stderr, "unknown dialect %q in -dialects\n", d)
			os.Exit(2)
		}
		dls = append(dls, d)
	}

	tb := &benchTB{verbose: verbose}
	defer tb.runCleanups()
	for _, d := range dls {
		if d == "mysql" {
			if e.mysqlURL == "" {
				logf("starting a private MariaDB server (internal/mysqltest) ...")
				e.mysqlURL = mysqltest.Start(tb).URL()
			}
		}
		if d != "postgres" {
			continue
		}
		switch {
		case *dbURL != "":
			e.pgURL = *dbURL
		case os.Getenv("SQLEASE_TEST_POSTGRES_URL") != "":
			e.pgURL = os.Getenv("SQLEASE_TEST_POSTGRES_URL")
		default:
			logf("starting a private PostgreSQL server (internal/pgtest) ...")
			e.pgURL = startPrivatePostgres(tb)
		}
		e.pgss = enablePGSS(ctx, e.pgURL)
		e.postmaster = findPostmaster(ctx, e.pgURL)
	}

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if *exectrace != "" {
		f, err := os.Create(*exectrace)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := rtrace.Start(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer func() { rtrace.Stop(); f.Close() }()
	}

	tuning := schedTuning{PollInterval: *poll, BatchSize: *batch, MaxConcurrent: *maxConc}
	printHeader(e, tuning, dls)

	for _, d := range dls {
		if d == "mysql" {
			// The daemon scenario (mysql.go) and the library's singletons.
			if want["daemon"] && !daemonScenario(ctx, e, d, *daemonJobs, *daemonNodes, *runs) {
				return
			}
			if want["ontime"] {
				// sqlease's ways only: River has no MySQL driver.
				o := ontimeOpts{jobs: *ontimeJobs, rate: *ontimeRate, lead: *ontimeLead, timeout: 30 * time.Second, late: *ontimeLate, ways: []string{"claim", "leader"}}
				if *ontimeWays != "" {
					o.ways = strings.Split(*ontimeWays, ",")
				}
				if !ontimeScenario(ctx, e, d, o, *backlog, *runs, *timeout) {
					return
				}
			}
			if want["singletons"] {
				for _, k := range sNodes {
					for _, n := range singletonsN {
						o := singletonOpts{dialect: d, n: n, nodes: k, window: *sWindow, settle: *sSettle} // lease mode: the bench's advisory sessions are PostgreSQL's
						if !singletonScenario(ctx, e, o, *runs) {
							return
						}
					}
				}
			}
			continue
		}
		if want["claim"] {
			for _, w := range workers {
				o := throughputOpts{dialect: d, mode: "claim", workers: w, jobs: *jobs, tuning: tuning, timeout: *timeout}
				title := fmt.Sprintf("claim throughput — %s, %d worker scheduler(s), %d due no-op jobs", d, w, *jobs)
				if !throughputScenario(ctx, e, title, o, *runs) {
					return
				}
			}
		}
		if want["submit"] {
			for _, n := range submitters {
				title := fmt.Sprintf("submit latency — %s, scheduler.Create of one-off jobs, %d submitter(s), %d creates", d, n, *submits)
				if !submitScenario(ctx, e, title, d, *submits, n, *runs) {
					return
				}
			}
		}
		if want["leader"] {
			o := throughputOpts{dialect: d, mode: "leader", jobs: *leaderJobs, tuning: tuning, timeout: *timeout}
			title := fmt.Sprintf("leader-mode throughput — %s, elector + scheduler.Lead, %d due no-op jobs", d, *leaderJobs)
			if !throughputScenario(ctx, e, title, o, *runs) {
				return
			}
		}
		if want["peer"] && (d == "postgres" || d == "sqlite") {
			if !peerScenario(ctx, e, d, *peerJobs, *runs, *peerDefault, tuning, *timeout) {
				return
			}
		}
		if want["ontime"] {
			o := ontimeOpts{jobs: *ontimeJobs, rate: *ontimeRate, lead: *ontimeLead, timeout: 30 * time.Second, late: *ontimeLate}
			if *ontimeWays != "" {
				o.ways = strings.Split(*ontimeWays, ",")
			}
			if !ontimeScenario(ctx, e, d, o, *backlog, *runs, *timeout) {
				return
			}
		}
		if want["trickle"] {
			if !trickleScenario(ctx, e, d, strings.Split(*trickleMode, ","), *trickleJobs, *trickleRate, *runs, tuning, *timeout) {
				return
			}
		}
		if want["daemon"] {
			if !daemonScenario(ctx, e, d, *daemonJobs, *daemonNodes, *runs) {
				return
			}
		}
		if want["singletons"] {
			for _, mode := range strings.Split(*sModes, ",") {
				for _, k := range sNodes {
					for _, n := range singletonsN {
						o := singletonOpts{dialect: d, n: n, nodes: k, advisory: strings.TrimSpace(mode) == "advisory", window: *sWindow, settle: *sSettle}
						if !singletonScenario(ctx, e, o, *runs) {
							return
						}
					}
				}
			}
		}
		if want["protocol"] {
			for _, k := range sNodes {
				for _, n := range singletonsN {
					if !protocolScenario(ctx, e, d, n, k, *runs) {
						return
					}
				}
			}
		}
		if want["placement"] {
			for _, n := range placementN {
				if !placementScenario(ctx, e, d, n, *runs) {
					return
				}
			}
		}
		if want["bulk"] {
			if !bulkScenario(ctx, e, d, *bulkJobs, *bulkBatch, *runs) {
				return
			}
		}
		if want["memory"] {
			o := memOpts
			o.Dialect = d
			title := fmt.Sprintf("leader memory bound — %s, %d pending future one-off jobs, MaxScheduled %d", d, o.Jobs, 10_000)
			if !memoryScenario(ctx, e, title, o, *memRuns) {
				return
			}
		}
	}
	if exitCode != 0 {
		tb.runCleanups()
		os.Exit(exitCode)
	}
}

func printHeader(e *env, t schedTuning, dls []string) {
	fmt.Printf("sqlease-bench  %s  GOMAXPROCS=%d  CPUs=%d  %s/%s\n", time.Now().Format(time.RFC3339), runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
	fmt.Printf("dialects: %s", strings.Join(dls, ","))
	if e.pgURL != "" {
		fmt.Printf("   postgres: %s (pg_stat_statements: %v, server CPU from /proc: %v)", redact(e.pgURL), e.pgss, e.postmaster != 0)
	}
	fmt.Println()
	pool := fmt.Sprintf("the library's (postgres.Open: MaxIdleConns %d, MaxOpenConns unlimited)", sqlstore.DefaultMaxIdleConns)
	if e.maxIdle >= 0 || e.maxOpen > 0 {
		pool = fmt.Sprintf("MaxIdleConns %d, MaxOpenConns %d (0 = unlimited)", e.maxIdle, e.maxOpen)
	}
	sched := "scheduler.Config defaults"
	var over []string
	if t.PollInterval != 0 {
		over = append(over, "PollInterval "+t.PollInterval.String())
	}
	if t.BatchSize != 0 {
		over = append(over, fmt.Sprintf("BatchSize %d", t.BatchSize))
	}
	if t.MaxConcurrent != 0 {
		over = append(over, fmt.Sprintf("MaxConcurrent %d", t.MaxConcurrent))
	}
	if len(over) > 0 {
		sched += " except " + strings.Join(over, ", ")
	}
	fmt.Printf("pools: %s;  %s;  trace: %v;  NOTIFY trigger dropped: %v\n", pool, sched, e.trace, e.dropNotify)
}
