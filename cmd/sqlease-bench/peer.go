package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The peer scenario: sqlease's claim and leader modes and River (tuned and
// with its defaults) work off the same number of due no-op jobs on the same
// PostgreSQL server, or on SQLite (River through riversqlite), in
// interleaved rounds, each on a fresh database; it prints the medians and
// every figure as a ratio to River tuned. River is a
// module of its own (cmd/sqlease-bench/river), built here with go build, so
// that sqlease's go.mod does not depend on it.

// buildRiver builds the River baseline into a temporary directory.
func buildRiver(ctx context.Context) (string, func(), error) {
	src, err := riverSource()
	if err != nil {
		return "", nil, err
	}
	return goBuild(ctx, src, "river", ".")
}

// riverSource finds cmd/sqlease-bench/river from the working directory (the
// module root or anywhere inside it).
func riverSource() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "cmd", "sqlease-bench", "river")
		if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("cmd/sqlease-bench/river not found from the working directory: run the bench from the repository")
		}
		dir = parent
	}
}

// runRiver works off n jobs with River on a fresh database.
// peerRun is one round of one way: its rate and CPU per job, of the client
// (the benchmark's process, or River's) and of the PostgreSQL server (all
// its processes; zero when the server is not local).
type peerRun struct {
	perSec         float64
	client, server time.Duration
	serverMeasured bool
	// busy is the machine's busy share over the work phase alone (setup
	// and seeding left out): whether the way waits on round trips or on
	// the CPUs.
	busy float64
}

func cpuPerJob(d time.Duration, n int64) time.Duration {
	if n <= 0 {
		return 0
	}
	return d / time.Duration(n)
}

func runRiver(ctx context.Context, e *env, bin, dialect string, n int, tuned bool) (peerRun, error) {
	tg, err := e.newTarget(ctx, dialect)
	if err != nil {
		return peerRun{}, err
	}
	defer tg.cleanup()
	drv := map[string]string{"postgres": "pgx", "sqlite": "sqlite"}[dialect]
	args := []string{"-driver", drv, "-db", tg.dsn, "-jobs", fmt.Sprint(n)}
	if tuned {
		args = append(args, "-tuned")
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return peerRun{}, err
	}
	if err := cmd.Start(); err != nil {
		return peerRun{}, err
	}
	// The server's CPU is counted over River's work phase alone (from its
	// start line to its result), as sqlease's is over its dispatch: not
	// over its InsertMany.
	var pgCPU func() *pgCPUUse
	var pg *pgCPUUse
	var workFrom, workTo cpuSample
	var res struct {
		Phase      string  `json:"phase"`
		PerSec     float64 `json:"per_sec"`
		CPUSeconds float64 `json:"cpu_seconds"`
	}
	var lines []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		res.Phase = ""
		if err := json.Unmarshal(sc.Bytes(), &res); err != nil {
			continue
		}
		switch {
		case res.Phase == "start" && dialect == "postgres":
			workFrom = sampleCPU()
			pgCPU = e.pgCPUStart()
		case res.Phase == "start":
			workFrom = sampleCPU()
			pgCPU = func() *pgCPUUse { return nil } // no server: SQLite runs in River's process
		case res.PerSec > 0 && pgCPU != nil:
			workTo = sampleCPU()
			pg = pgCPU()
		}
	}
	if err := cmd.Wait(); err != nil {
		return peerRun{}, fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	if res.PerSec <= 0 || pgCPU == nil {
		return peerRun{}, fmt.Errorf("River's output %q: no start line and result", lines)
	}
	r := peerRun{perSec: res.PerSec, client: cpuPerJob(time.Duration(res.CPUSeconds*float64(time.Second)), int64(n)),
		busy: cpuBetween(workFrom, workTo).Utilization()}
	if pg != nil {
		r.server, r.serverMeasured = cpuPerJob(pg.Total, int64(n)), true
	}
	return r, nil
}

// peerScenario runs the rounds and prints the table.
func peerScenario(ctx context.Context, e *env, dialect string, jobs, runs int, riverDefaults bool, tuning schedTuning, timeout time.Duration) bool {
	defaults, driver := "", ""
	if riverDefaults {
		defaults = " and with defaults (MaxWorkers 100)"
	}
	if dialect == "sqlite" {
		driver = " through riversqlite (one connection, as its documentation asks)"
	}
	fmt.Printf("\n== peer baseline — %s, %d due no-op jobs per run, interleaved: sqlease claim (defaults, 1 worker), sqlease leader, River v0.51.1 tuned (MaxWorkers 1000, FetchCooldown 1 ms)%s%s\n", dialect, jobs, defaults, driver)
	bin, cleanup, err := buildRiver(ctx)
	if err != nil {
		fmt.Printf("  ERROR %v\n", err)
		exitCode = 1
		return true
	}
	defer cleanup()
	type way struct {
		name string
		run  func() (peerRun, error)
	}
	sq := func(mode string) func() (peerRun, error) {
		return func() (peerRun, error) {
			r, err := runThroughput(ctx, e, throughputOpts{dialect: dialect, mode: mode, workers: 1, jobs: jobs, tuning: tuning, timeout: timeout})
			if err != nil {
				return peerRun{}, err
			}
			if p := r.problems(); p != "" {
				return peerRun{}, fmt.Errorf("exactly-once check: %s", p)
			}
			pr := peerRun{perSec: r.PerSec, client: cpuPerJob(r.CPU.Self, r.Done), busy: r.CPU.Utilization()}
			if r.PGCPU != nil {
				pr.server, pr.serverMeasured = cpuPerJob(r.PGCPU.Total, r.Done), true
			}
			return pr, nil
		}
	}
	rv := func(tuned bool) func() (peerRun, error) {
		return func() (peerRun, error) { return runRiver(ctx, e, bin, dialect, jobs, tuned) }
	}
	ways := []way{{"River tuned", rv(true)}, {"sqlease claim", sq("claim")}, {"sqlease leader", sq("leader")}}
	if riverDefaults {
		ways = append(ways, way{"River defaults", rv(false)})
	}
	rates := make([][]float64, len(ways))
	clients, servers, works := make([][]float64, len(ways)), make([][]float64, len(ways)), make([][]float64, len(ways))
	// ratios[i]: way i over River tuned, round by round. The machine's speed
	// drifts over minutes; a ratio of two runs a few seconds apart keeps
	// less of that drift than the ratio of the medians.
	ratios := make([][]float64, len(ways))
	// The machine's load: busy share the second before each run (other
	// processes) and over the run (setup included).
	var bgs, busies []float64
	for r := 1; r <= runs; r++ {
		round := make([]float64, len(ways))
		for i, w := range ways {
			if ctx.Err() != nil {
				return false
			}
			bg := settle(e.settleBusy, e.settleWait)
			before := sampleCPU()
			pr, err := w.run()
			busy := cpuBetween(before, sampleCPU()).Utilization()
			bgs, busies = append(bgs, bg), append(busies, busy)
			if err != nil {
				fmt.Printf("  run %d, %s: ERROR %v\n", r, w.name, err)
				exitCode = 1
				continue
			}
			rates[i] = append(rates[i], pr.perSec)
			round[i] = pr.perSec
			clients[i] = append(clients[i], float64(pr.client.Microseconds()))
			works[i] = append(works[i], pr.busy)
			server := "server not local"
			if pr.serverMeasured {
				servers[i] = append(servers[i], float64(pr.server.Microseconds()))
				server = fmt.Sprintf("server %4d µs", pr.server.Microseconds())
			}
			fmt.Printf("  run %d: [bg %2.0f%%] %-16s %8.0f jobs/s  CPU per job: client %4d µs, %s  machine %2.0f%% over the work, %2.0f%% with setup\n",
				r, bg*100, w.name, pr.perSec, pr.client.Microseconds(), server, pr.busy*100, busy*100)
		}
		for i := range ways {
			if round[0] > 0 && round[i] > 0 {
				ratios[i] = append(ratios[i], round[i]/round[0])
			}
		}
	}
	fmt.Printf("  medians of %d runs (ratio to River tuned: the median of the rounds' ratios [their range]; CPU per job, client = the benchmark's or River's process, server = every PostgreSQL process; SQLite has none, its work is in the client):\n", runs)
	if len(bgs) > 0 {
		fmt.Printf("  machine load: before each run %s busy, over each run %s\n", summarize(bgs).format(fpct), summarize(busies).format(fpct))
	}
	for i, w := range ways {
		ratio := "-"
		if len(ratios[i]) > 0 {
			ratio = fmt.Sprintf("%.2f × [%.2f .. %.2f]", medianOf(ratios[i]), slices.Min(ratios[i]), slices.Max(ratios[i]))
		}
		server := "-"
		if len(servers[i]) > 0 {
			server = fmt.Sprintf("%.0f µs", medianOf(servers[i]))
		}
		fmt.Printf("    %-16s %8.0f jobs/s  %-22s  client %4.0f µs/job  server %s/job  machine %2.0f%% busy over the work\n", w.name, medianOf(rates[i]), ratio, medianOf(clients[i]), server, 100*medianOf(works[i]))
	}
	return true
}
