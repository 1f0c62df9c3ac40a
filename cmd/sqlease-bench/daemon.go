package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The daemon scenario: real `sqlease serve` nodes (on PostgreSQL, or on
// one SQLite file, the daemon's default) deliver
// HTTP actions to a receiver in this process. n one-off jobs, created
// through POST /v1/jobs:batch, all fall due at one instant T; the figures
// are deliveries per second from T to the last delivery, and the p50/p99
// delay from each occurrence's scheduled_for to its arrival. Every job
// must arrive exactly once.

type delivery struct {
	job   string
	delay time.Duration
	at    time.Time
}

type receiver struct {
	mu   sync.Mutex
	got  []delivery
	done chan struct{}
	want int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	sf, _ := time.Parse(time.RFC3339Nano, req.Header.Get("Sqlease-Scheduled-For"))
	_, _ = io.Copy(io.Discard, req.Body)
	r.mu.Lock()
	r.got = append(r.got, delivery{job: req.Header.Get("Sqlease-Job"), delay: now.Sub(sf), at: now})
	if len(r.got) == r.want {
		close(r.done)
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// buildSqlease builds the daemon into a temporary directory, or returns
// $SQLEASE_BENCH_SQLEASE_BIN when set: a binary built from another commit,
// for before/after rounds measured alternately.
func buildSqlease(ctx context.Context) (string, func(), error) {
	if bin := os.Getenv("SQLEASE_BENCH_SQLEASE_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", nil, fmt.Errorf("SQLEASE_BENCH_SQLEASE_BIN: %w", err)
		}
		return bin, func() {}, nil
	}
	return goBuild(ctx, "", "sqlease", "github.com/sqlease/sqlease/cmd/sqlease")
}

// daemonDispatches are the dispatch modes the daemon scenario runs: both,
// or those $SQLEASE_BENCH_DAEMON_DISPATCH lists (comma-separated).
func daemonDispatches() ([]string, error) {
	v := os.Getenv("SQLEASE_BENCH_DAEMON_DISPATCH")
	if v == "" {
		return []string{"leader", "claim"}, nil
	}
	var out []string
	for _, d := range strings.Split(v, ",") {
		switch d = strings.TrimSpace(d); d {
		case "leader", "claim":
			out = append(out, d)
		default:
			return nil, fmt.Errorf("SQLEASE_BENCH_DAEMON_DISPATCH: %q is neither leader nor claim", d)
		}
	}
	return out, nil
}

// goBuild builds pkg, from the directory src ("": the working directory),
// into a temporary directory as name; cleanup removes it.
func goBuild(ctx context.Context, src, name, pkg string) (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "sqlease-bench-"+name+"-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	bin = filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("building %s: %v\n%s", pkg, err, out)
	}
	return bin, cleanup, nil
}

// nodeStopTimeout bounds a node's exit after SIGINT: a node that hangs on
// its way out is an error of the run, not a bench that never ends.
const nodeStopTimeout = time.Minute

// startNode starts `sqlease serve` on a free port (logging warnings only:
// a daemon logs two lines per run at info) and returns its HTTP address
// and pid once /healthz answers, and how to stop it: SIGINT, then SIGKILL
// and an error if it has not exited within nodeStopTimeout.
func startNode(ctx context.Context, bin, dsn, holder string, extra ...string) (string, int, func() error, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", 0, nil, err
	}
	addr := l.Addr().String()
	l.Close()
	args := append([]string{"serve", "--db", dsn, "--http", addr, "--holder-id", holder, "--log-level", "warn"}, extra...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if dir := os.Getenv("SQLEASE_BENCH_NODE_PROFILE"); dir != "" {
		// A CPU profile of each node's life, named after the node, its
		// flags and the hour: go tool pprof -ignore createJobs leaves the
		// setup out.
		name := fmt.Sprintf("%s%s-%s.prof", holder, strings.Join(extra, ""), time.Now().Format("150405.000"))
		cmd.Env = append(cmd.Env, "SQLEASE_CPU_PROFILE="+filepath.Join(dir, strings.ReplaceAll(name, "-", "")))
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return "", 0, nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() error {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
			return nil
		case <-time.After(nodeStopTimeout):
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("node %s did not exit within %s of SIGINT (killed)", holder, nodeStopTimeout)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr, cmd.Process.Pid, stop, nil
			}
		}
	}
	_ = stop()
	return "", 0, nil, fmt.Errorf("node %s did not serve /healthz within 30s: %s", holder, stderr.String())
}

// daemonRun is one run's figures. The CPU each part used from the due
// instant to the last arrival, per delivery, says what a node costs
// whatever else shares the machine (here: the receiver and the database).
type daemonRun struct {
	perSec                  float64
	p50, p99                time.Duration
	nodeCPU, dbCPU, recvCPU time.Duration // per delivery; dbCPU 0 where unknown
	machine                 float64       // busy share of the machine
	nodePeak                int64         // the nodes' largest peak RSS (VmHWM), bytes
	conns                   int64         // connections the nodes opened to the receiver
}

func runDaemon(ctx context.Context, e *env, bin, dialect string, n, nodes int, dispatch string) (res daemonRun, err error) {
	tg, err := e.newTarget(ctx, dialect)
	if err != nil {
		return res, err
	}
	defer tg.cleanup()
	db := tg.dsn
	if dialect == "sqlite" {
		db = "sqlite:" + tg.dsn
	}
	rec := &receiver{done: make(chan struct{}), want: n}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	// Connections the nodes opened to the receiver: about the number of
	// runs sending at once, when the nodes reuse them.
	var conns atomic.Int64
	srv := &http.Server{Handler: rec, ReadHeaderTimeout: 5 * time.Second, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	var addrs []string
	var pids []int
	for i := range nodes {
		a, pid, stop, err := startNode(ctx, bin, db, fmt.Sprintf("n%d", i+1), "--dispatch", dispatch)
		if err != nil {
			return res, err
		}
		defer func() {
			if serr := stop(); serr != nil && err == nil {
				err = serr
			}
		}()
		addrs = append(addrs, a)
		pids = append(pids, pid)
	}
	nodesCPU := func() (t time.Duration) {
		for _, pid := range pids {
			_, self, children, _ := procCPU(pid)
			t += self + children
		}
		return t
	}
	time.Sleep(time.Second) // a leader, and its schedule built
	// Time to create them all first: PostgreSQL's bulk insert takes
	// 50,000 jobs/s and more, SQLite's one statement per job about 4,000.
	createRate := 20_000
	if dialect != "postgres" {
		createRate = 2_000 // MariaDB: 4,000–6,000 jobs/s on a busy machine
	}
	due := time.Now().Add(time.Duration(n/createRate+3) * time.Second).UTC().Truncate(time.Millisecond)
	url := "http://" + l.Addr().String() + "/hook"
	for lo := 0; lo < n; lo += 5000 {
		var body bytes.Buffer
		for i := lo; i < min(lo+5000, n); i++ {
			fmt.Fprintf(&body, `{"name":"d-%07d","schedule":{"at":%q},"action":{"http":{"url":%q}}}`+"\n", i, due.Format(time.RFC3339Nano), url)
		}
		resp, err := http.Post("http://"+addrs[0]+"/v1/jobs:batch", "application/x-ndjson", &body)
		if err != nil {
			return res, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return res, fmt.Errorf("POST /v1/jobs:batch: %s: %.200s", resp.Status, b)
		}
	}
	if time.Now().After(due) {
		return res, fmt.Errorf("creating %d jobs took past their due time", n)
	}
	time.Sleep(time.Until(due))
	node0, machine0, pg := nodesCPU(), sampleCPU(), e.pgCPUStart()
	if dialect != "postgres" {
		pg = func() *pgCPUUse { return nil }
	}
	select {
	case <-rec.done:
		machine := cpuBetween(machine0, sampleCPU())
		res.nodeCPU = (nodesCPU() - node0) / time.Duration(n)
		res.recvCPU = machine.Self / time.Duration(n)
		if u := pg(); u != nil {
			res.dbCPU = u.Total / time.Duration(n)
		}
		res.machine = machine.Utilization()
		for _, pid := range pids {
			_, hwm := procMem(strconv.Itoa(pid))
			res.nodePeak = max(res.nodePeak, hwm)
		}
	case <-time.After(time.Until(due) + 5*time.Minute):
	case <-ctx.Done():
		return res, ctx.Err()
	}
	time.Sleep(500 * time.Millisecond) // a duplicate would arrive now
	rec.mu.Lock()
	got := append([]delivery(nil), rec.got...)
	rec.mu.Unlock()
	seen := map[string]int{}
	var last time.Time
	delays := make([]float64, 0, len(got))
	for _, d := range got {
		seen[d.job]++
		if d.at.After(last) {
			last = d.at
		}
		delays = append(delays, float64(d.delay))
	}
	var dups []string
	for j, c := range seen {
		if c > 1 {
			dups = append(dups, j)
		}
	}
	if len(dups) > 0 || len(seen) != n {
		return res, fmt.Errorf("exactly-once: %d of %d jobs delivered, %d more than once (%s)", len(seen), n, len(dups), strings.Join(dups[:min(len(dups), 5)], ","))
	}
	sort.Float64s(delays)
	q := func(p float64) time.Duration { return time.Duration(delays[int(p*float64(len(delays)-1))]) }
	res.perSec, res.p50, res.p99 = float64(n)/last.Sub(due).Seconds(), q(0.5), q(0.99)
	res.conns = conns.Load()
	return res, nil
}

func daemonScenario(ctx context.Context, e *env, dialect string, n, nodes, runs int) bool {
	fmt.Printf("\n== daemon delivery — %s, %d one-off HTTP jobs due at one instant, %d sqlease serve node(s), receiver in this process\n", dialect, n, nodes)
	bin, cleanup, err := buildSqlease(ctx)
	if err != nil {
		fmt.Printf("  ERROR %v\n", err)
		exitCode = 1
		return true
	}
	defer cleanup()
	dispatches, err := daemonDispatches()
	if err != nil {
		fmt.Printf("  ERROR %v\n", err)
		exitCode = 1
		return true
	}
	for _, dispatch := range dispatches {
		var rates, nodeCPU, p99s []float64
		for r := 1; r <= runs; r++ {
			res, err := runDaemon(ctx, e, bin, dialect, n, nodes, dispatch)
			if ctx.Err() != nil {
				return false
			}
			if err != nil {
				fmt.Printf("  run %d, %s: ERROR %v\n", r, dispatch, err)
				exitCode = 1
				continue
			}
			rates, nodeCPU, p99s = append(rates, res.perSec), append(nodeCPU, float64(res.nodeCPU)), append(p99s, float64(res.p99))
			db := "?"
			if res.dbCPU > 0 {
				db = fmtDur(res.dbCPU)
			}
			fmt.Printf("  run %d: --dispatch %-6s %7.0f deliveries/s  scheduled_for → arrival p50 %s p99 %s  CPU per delivery: node %s, database %s, receiver %s (machine %.0f%% busy); node peak RSS %s; %d connections to the receiver\n",
				r, dispatch, res.perSec, fmtDur(res.p50), fmtDur(res.p99), fmtDur(res.nodeCPU), db, fmtDur(res.recvCPU), 100*res.machine, mib(res.nodePeak), res.conns)
		}
		if len(rates) > 0 {
			sort.Float64s(rates)
			sort.Float64s(nodeCPU)
			sort.Float64s(p99s)
			c := time.Duration(nodeCPU[len(nodeCPU)/2])
			// What one core of a node's own would deliver, whatever shares
			// this machine: the figure that carries to a deployment where
			// the receiver and the database run elsewhere.
			fmt.Printf("  median, --dispatch %s: %.0f deliveries/s [%.0f .. %.0f], p99 from scheduled_for %s; node CPU %s per delivery (%.0f deliveries per node CPU second)\n",
				dispatch, rates[len(rates)/2], rates[0], rates[len(rates)-1], fmtDur(time.Duration(p99s[len(p99s)/2])), fmtDur(c), float64(time.Second)/float64(c))
		}
	}
	return true
}
