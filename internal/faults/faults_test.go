package faults

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/internal/ledger"
	"github.com/sqlease/sqlease/internal/mysqltest"
	"github.com/sqlease/sqlease/internal/pgtest"
	"github.com/sqlease/sqlease/internal/tick"
	"github.com/sqlease/sqlease/mysql"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/sqlite"
)

// bin is the sqlease command TestMain built.
var bin string

func TestMain(m *testing.M) {
	code := fleettest.Main(m, "faults", true, os.Getenv("SQLEASE_FAULT_RACE") == "1", &bin)
	logFigures()
	os.Exit(code)
}

// Timings of every node, as in the fault report (issue 10).
const (
	leaseDuration   = 2 * time.Second
	renewInterval   = 500 * time.Millisecond
	acquireInterval = 200 * time.Millisecond
	acquireJitter   = 0.2 // the elector's default
	refreshInterval = 200 * time.Millisecond
	stopFor         = leaseDuration * 5 / 2 // SIGSTOP of the leader: 2.5 × lease

	// margin absorbs a loaded two-core machine.
	margin = time.Second

	// leaseFailover bounds a failover that waits for the lease to expire:
	// lease mode after any fault, advisory mode with a frozen leader.
	leaseFailover = leaseDuration + acquireInterval*(10+10*acquireJitter)/10 + margin
	// crashFailover bounds advisory failover after the leader's process
	// died: the database frees its session lock at once (about 15 ms).
	crashFailover = time.Second
	// dispatchBound bounds how long after the fault (after SIGCONT, the
	// restart, or the failover) a one-off job submitted then takes to run.
	dispatchBound = leaseFailover + refreshInterval + margin
	// claimFailover bounds, in claim dispatch, the re-run of the occurrence
	// a killed, frozen or cut-off worker held: its worker lease expires
	// (renewed last at most a lease ago), then another node's next claim
	// (every refreshInterval, the nodes' --poll-interval) takes it over.
	claimFailover = leaseDuration + refreshInterval + margin
)

type fault string

const (
	faultKill      fault = "sigkill_leader"
	faultStop      fault = "sigstop_leader"
	faultRestart   fault = "restart_database"
	faultTerminate fault = "terminate_backends"
	faultRebuild   fault = "fault_during_rebuild"
	faultCut       fault = "cut_leader_from_db"
	// faultStopKill freezes the leader past its lease, wakes it once
	// another node leads (without the lock, in advisory mode), and kills
	// that node with kill -9 once the lock has reached its term: the
	// failover must be by the lock again, not by lease expiry (issue 31
	// item 7). Advisory leader dispatch only.
	faultStopKill fault = "sigstop_then_sigkill_leader"
)

// in is f's name in mode: in claim dispatch the fault hits the worker
// running the in-flight run, in a singleton trial its holder.
func (f fault) in(mode string) string {
	switch {
	case strings.HasSuffix(mode, "+claim"):
		return strings.Replace(string(f), "leader", "worker", 1)
	case strings.HasPrefix(mode, "singleton"):
		return strings.Replace(string(f), "leader", "holder", 1)
	}
	return string(f)
}

// backend is one database kind with the faults it can take.
type backend struct {
	dialect string // postgres, mysql, sqlite
	// modes are election modes (--election), each with the leader
	// dispatching, or with "+claim" every node claiming (--dispatch claim).
	modes  []string
	faults []fault
	// fresh returns a new database for t: the nodes' URL and an admin
	// connection to it.
	fresh func(t *testing.T) (string, *sql.DB)
	// restart restarts the database server (faultRestart only).
	restart func(t *testing.T)
	// writeLocked, when not nil, reports whether another process holds
	// the database's write lock (SQLite).
	writeLocked func(ctx context.Context, db *sql.DB) (bool, error)
	admin       *sql.DB // set by a trial: its fresh database
}

// freeze SIGSTOPs victim and returns when. A process of a SQLite fleet
// frozen inside a write transaction keeps the file's one write lock: no
// other node can write until it wakes or dies, which sqlease cannot change
// (README, SQLite). Such a freeze is undone and tried again a moment later,
// so that the trial tests what sqlease decides.
func (b backend) freeze(t *testing.T, victim *fleettest.Node) time.Time {
	t.Helper()
	for try := 1; ; try++ {
		at := time.Now()
		victim.Stop()
		victim.WaitStopped(5 * time.Second)
		if b.writeLocked == nil {
			return at
		}
		locked, err := b.writeLocked(context.Background(), b.admin)
		if err != nil {
			t.Fatalf("probing the write lock: %v", err)
		}
		if !locked {
			if try > 1 {
				t.Logf("froze %s outside a write transaction at try %d", victim.Holder, try)
			}
			return at
		}
		if try == 50 {
			t.Fatalf("%s was inside a write transaction at each of %d freezes", victim.Holder, try)
		}
		victim.Cont()
		time.Sleep(time.Duration(5+rand.IntN(50)) * time.Millisecond)
	}
}

// serverFault restarts the database server (faultRestart) or terminates
// every backend of the trial's database (faultTerminate).
func (b backend) serverFault(t *testing.T, f fault) {
	t.Helper()
	if f == faultRestart {
		b.restart(t)
		return
	}
	n, err := fleettest.TerminateBackends(context.Background(), b.admin, b.dialect)
	if err != nil {
		t.Fatalf("terminating the backends: %v", err)
	}
	t.Logf("terminated %d backends", n)
}

// trials is how many trials each mode and fault gets (SQLEASE_FAULT_TRIALS).
func trials(t *testing.T) int { return fleettest.EnvInt(t, "SQLEASE_FAULT_TRIALS", 1) }

func runSuite(t *testing.T, b backend) {
	for _, mode := range b.modes {
		for _, f := range b.faults {
			if f == faultStopKill && mode != "advisory" {
				continue // the lock's path after a freeze: advisory leader mode
			}
			for i := range trials(t) {
				t.Run(fmt.Sprintf("%s/%s/%d", mode, f.in(mode), i+1), func(t *testing.T) {
					trial(t, b, mode, f)
				})
			}
		}
	}
	// A singleton has a lease of its own in the election mode (dispatch
	// plays no part); a rebuild is the leader's alone.
	for _, mode := range b.modes {
		if strings.HasSuffix(mode, "+claim") {
			continue
		}
		for _, f := range b.faults {
			if f == faultRebuild || f == faultStopKill {
				continue
			}
			for i := range trials(t) {
				t.Run(fmt.Sprintf("singleton/%s/%s/%d", mode, f.in("singleton"), i+1), func(t *testing.T) {
					singletonTrial(t, b, mode, f)
				})
			}
		}
	}
}

// serverBackend is a server dialect's suite on a private server (restarting
// it must not disturb other tests): every election mode with either
// dispatch, every fault.
func serverBackend(dialect string, restart func(t *testing.T), fresh func(t *testing.T) (string, *sql.DB)) backend {
	return backend{
		dialect: dialect,
		modes:   []string{"advisory", "lease", "advisory+claim", "lease+claim"},
		faults:  []fault{faultKill, faultStop, faultRestart, faultTerminate, faultRebuild, faultCut, faultStopKill},
		fresh:   fresh,
		restart: restart,
	}
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	runSuite(t, serverBackend("postgres", func(t *testing.T) { srv.Restart(t) }, func(t *testing.T) (string, *sql.DB) {
		url := pgtest.CreateDatabase(t, srv.URL())
		db := opened(t, postgres.Open, url)
		// The server runs with synchronous_commit off, which loses the
		// last few hundred milliseconds of acknowledged commits in a crash
		// (the immediate restart): accepted jobs must survive it, so this
		// database commits synchronously.
		if _, err := db.Exec(`DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET synchronous_commit = on', current_database()); END $$`); err != nil {
			t.Fatal(err)
		}
		return url, db
	}))
}

func TestMariaDB(t *testing.T) {
	t.Parallel()
	// The private server also keeps acknowledged commits through a crash
	// of mariadbd.
	srv := mysqltest.Start(t)
	runSuite(t, serverBackend("mysql", func(t *testing.T) { srv.Restart(t) }, func(t *testing.T) (string, *sql.DB) {
		u := mysqltest.CreateDatabase(t, srv.URL())
		return u, opened(t, mysql.Open, u)
	}))
}

func TestSQLite(t *testing.T) {
	t.Parallel()
	runSuite(t, backend{
		dialect:     "sqlite",
		modes:       []string{"lease", "lease+claim"},
		faults:      []fault{faultKill, faultStop},
		writeLocked: fleettest.SQLiteWriteLocked,
		fresh: func(t *testing.T) (string, *sql.DB) {
			path := filepath.Join(t.TempDir(), "sqlease.db")
			return "sqlite:" + path, opened(t, sqlite.Open, path)
		},
	})
}

// opened is the database open(dsn) opens, closed when t ends.
func opened(t *testing.T, open func(string) (*sql.DB, error), dsn string) *sql.DB {
	t.Helper()
	db, err := open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// --- one trial ---

// submitter creates one-off jobs at 5/s on random nodes it may talk to and
// remembers those accepted.
type submitter struct {
	rc    *fleettest.Receiver
	nodes func() []*fleettest.Node

	mu       sync.Mutex
	avoid    map[*fleettest.Node]bool // frozen or dead nodes
	accepted map[string]time.Time     // job name → when the API answered 2xx
	seq      int
}

func (s *submitter) setAvoid(n *fleettest.Node, v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.avoid[n] = v
}

// submit creates one one-off job named prefix-<seq> on a random node and
// returns its name and whether it was accepted.
func (s *submitter) submit(prefix string) (string, bool) {
	s.mu.Lock()
	s.seq++
	name := fmt.Sprintf("%s-%d", prefix, s.seq)
	var live []*fleettest.Node
	for _, n := range s.nodes() {
		if !s.avoid[n] && !n.Exited() {
			live = append(live, n)
		}
	}
	s.mu.Unlock()
	if len(live) == 0 {
		return name, false
	}
	n := live[rand.IntN(len(live))]
	code, _, err := n.Do("POST", "/v1/jobs", map[string]any{
		"name":     name,
		"schedule": map[string]any{},
		"action":   map[string]any{"http": map[string]any{"url": s.rc.URL + "/once", "timeout": "10s"}},
		"retry":    map[string]any{"max_attempts": 10, "backoff": "200ms"},
	})
	if err != nil || code/100 != 2 {
		return name, false
	}
	s.mu.Lock()
	s.accepted[name] = time.Now()
	s.mu.Unlock()
	return name, true
}

func (s *submitter) run(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	tick.Every(ctx, 200*time.Millisecond, func() { s.submit("once") })
}

func (s *submitter) acceptedJobs() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Time, len(s.accepted))
	for k, v := range s.accepted {
		out[k] = v
	}
	return out
}

func createJob(t *testing.T, n *fleettest.Node, job map[string]any) {
	t.Helper()
	code, body, err := n.Do("POST", "/v1/jobs", job)
	if err != nil || code/100 != 2 {
		t.Fatalf("creating job %v on %s: %d %s %v", job["name"], n.Holder, code, body, err)
	}
}

// waitLeader waits for exactly one node of nodes to answer /readyz as
// leader and returns it with its epoch.
func waitLeader(t *testing.T, nodes []*fleettest.Node, timeout time.Duration) (*fleettest.Node, int64) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var leaders []*fleettest.Node
		var epoch int64
		var desc []string
		for _, n := range nodes {
			r := n.Readyz()
			desc = append(desc, n.Holder+": "+r.Body)
			if r.Code == 200 && r.Mode == "leader" {
				leaders, epoch = append(leaders, n), r.Epoch
			}
		}
		if len(leaders) == 1 {
			return leaders[0], epoch
		}
		if time.Now().After(deadline) {
			t.Fatalf("no single leader within %v: %s", timeout, strings.Join(desc, "; "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// acquiredAfter waits up to timeout for a leader_acquired log line with an
// epoch above epoch on any node but skip (nil: any node) and returns when
// the test read it, the node and the epoch.
func acquiredAfter(nodes []*fleettest.Node, skip *fleettest.Node, marks map[*fleettest.Node]int, epoch int64, timeout time.Duration) (time.Time, *fleettest.Node, int64, bool) {
	type hit struct {
		l fleettest.LogLine
		n *fleettest.Node
	}
	ch := make(chan hit, len(nodes))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, n := range nodes {
		if n == skip {
			continue
		}
		go func() {
			l, ok := n.TryWaitLogFrom(marks[n], timeout, func(l fleettest.LogLine) bool {
				return ctx.Err() != nil || l.Msg == "leader_acquired" && l.Int("lease_epoch") > epoch
			})
			if ok && ctx.Err() == nil {
				ch <- hit{l, n}
			}
		}()
	}
	select {
	case h := <-ch:
		return h.l.Recv, h.n, h.l.Int("lease_epoch"), true
	case <-time.After(timeout):
		return time.Time{}, nil, 0, false
	}
}

// startFleet starts nodes n1, n2 and n3 on url with the suites' timings
// and flags; for faultCut each reaches the database through a proxy of its
// own, returned by holder.
func startFleet(t *testing.T, url string, f fault, flags ...string) (*fleettest.Daemons, []*fleettest.Node, map[string]*fleettest.Proxy) {
	proxies := map[string]*fleettest.Proxy{}
	if f == faultCut {
		u, err := neturl.Parse(url)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range []string{"n1", "n2", "n3"} {
			proxies[h] = fleettest.NewProxy(t, u.Host)
		}
	}
	d := fleettest.NewDaemons(t, bin, url, append([]string{
		"--lease-duration", leaseDuration.String(),
		"--renew-interval", renewInterval.String(),
		"--acquire-interval", acquireInterval.String(),
		"--schedule-refresh-interval", refreshInterval.String(),
		"--shutdown-timeout", "5s"}, flags...)...)
	if f == faultCut {
		d.DBFor = func(holder string) string {
			u, _ := neturl.Parse(url)
			u.Host = proxies[holder].Addr()
			return u.String()
		}
	}
	return d, d.Start("n1", "n2", "n3"), proxies
}

func trial(t *testing.T, b backend, mode string, f fault) {
	ctx := context.Background()
	url, admin := b.fresh(t)
	b.admin = admin
	election, claim := strings.CutSuffix(mode, "+claim")
	dispatchMode := "leader"
	if claim {
		dispatchMode = "claim"
	}
	rc := fleettest.NewReceiver(t)
	d, nodes, proxies := startFleet(t, url, f, "--election", election, "--dispatch", dispatchMode, "--poll-interval", refreshInterval.String())
	leader, epoch0 := waitLeader(t, nodes, leaseFailover+5*time.Second)

	retry := map[string]any{"max_attempts": 10, "backoff": "200ms"}
	createJob(t, nodes[0], map[string]any{"name": "tick", "schedule": map[string]any{"every": "1s"}, "missed_runs": "run_all",
		"action": map[string]any{"http": map[string]any{"url": rc.URL + "/tick", "timeout": "10s"}}, "retry": retry})
	createJob(t, nodes[1], map[string]any{"name": "slow", "schedule": map[string]any{"every": "2s"},
		"action": map[string]any{"http": map[string]any{"url": rc.URL + "/slow/delay/1500ms", "timeout": "10s"}}, "retry": retry})
	createAllowJob(t, nodes[2], rc, retry)

	sub := &submitter{rc: rc, nodes: d.Nodes, avoid: map[*fleettest.Node]bool{}, accepted: map[string]time.Time{}}
	subCtx, stopSub := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go sub.run(subCtx, &wg)
	defer func() { stopSub(); wg.Wait() }()

	// The fault hits while the leader (claim dispatch: whichever node
	// claimed it, the victim) is inside the slow job's HTTP request.
	inflight, ok := rc.WaitFor(10*time.Second, func(dl fleettest.Delivery) bool {
		return dl.Job == "slow" && dl.End.IsZero() && (claim || dl.Holder == leader.Holder) && time.Since(dl.Start) > 100*time.Millisecond
	})
	if !ok {
		t.Fatalf("leader %s@%d never sent the slow job: deliveries %v", leader.Holder, epoch0, rc.Deliveries())
	}
	victim := leader
	if claim {
		if victim = d.Node(inflight.Holder); victim == nil {
			t.Fatalf("the slow job was sent by %q, not a node of this fleet", inflight.Holder)
		}
		t.Logf("claim dispatch: the fault hits %s, which is running %s (leader: %s@%d)", victim.Holder, inflight, leader.Holder, epoch0)
	}

	marks := map[*fleettest.Node]int{}
	for _, n := range nodes {
		marks[n] = n.Mark()
	}
	var (
		failover   time.Duration // fault → another node's leader_acquired
		failedOver bool
		bound      time.Duration
		newLeader  string
	)
	measure := func(from time.Time, skip *fleettest.Node, timeout time.Duration) {
		if claim {
			// Failover is another node running the victim's occurrence.
			dl, ok := rc.WaitFor(timeout, func(dl fleettest.Delivery) bool {
				return dl.Key == inflight.Key && dl.Holder != skip.Holder && dl.Start.After(from)
			})
			if ok {
				failover, failedOver, newLeader = dl.Start.Sub(from), true, fmt.Sprintf("%s@%d", dl.Holder, dl.Epoch)
			}
			return
		}
		at, n, ep, ok := acquiredAfter(nodes, skip, marks, epoch0, timeout)
		if ok {
			failover, failedOver, newLeader = at.Sub(from), true, fmt.Sprintf("%s@%d", n.Holder, ep)
		}
	}
	crashBound := leaseFailover // a process gone
	if claim {
		crashBound = claimFailover
	} else if election == "advisory" {
		crashBound = crashFailover
	}
	lossBound := leaseFailover // a process frozen or cut off
	if claim {
		lossBound = claimFailover
	}
	t0 := time.Now()
	switch f {
	case faultKill:
		sub.setAvoid(victim, true)
		victim.Kill()
		bound = crashBound
		measure(t0, victim, bound+5*time.Second)
	case faultStop:
		sub.setAvoid(victim, true)
		t0 = b.freeze(t, victim)
		bound = lossBound
		measure(t0, victim, stopFor)
		if rest := stopFor - time.Since(t0); rest > 0 {
			time.Sleep(rest) // the victim stays frozen for 2.5 × lease whatever happens
		}
		victim.Cont()
		sub.setAvoid(victim, false)
	case faultStopKill:
		sub.setAvoid(victim, true)
		frozenAt := b.freeze(t, victim)
		measure(frozenAt, victim, stopFor)
		if !failedOver {
			t.Fatalf("FAILOVER: no node led within %v of freezing %s", stopFor, victim.Holder)
		}
		t.Logf("frozen %s replaced after %v by %s", victim.Holder, failover.Round(time.Millisecond), newLeader)
		second := d.Node(strings.Split(newLeader, "@")[0])
		victim.Cont()
		sub.setAvoid(victim, false)
		// Once the woken node lets go of the lock, a term acquired without
		// it takes it. The lock can also come first: MariaDB ends the
		// frozen holder's silent session after lease + 1 s (wait_timeout),
		// and when the lease path is slower than that (a loaded machine)
		// the follower takes over through the lock, a locked term from its
		// start. Both are read from the log since the fault, by the term's
		// epoch: read only after the failover was seen, a lock won in
		// between was missed (CI: "LOCKLESS" after a 3.0 s failover).
		termEpoch, _ := strconv.ParseInt(newLeader[strings.LastIndex(newLeader, "@")+1:], 10, 64)
		ofTerm := func(msg string) func(fleettest.LogLine) bool {
			return func(l fleettest.LogLine) bool { return l.Msg == msg && l.Int("lease_epoch") == termEpoch }
		}
		if _, lockless := second.TryWaitLogFrom(marks[second], time.Second, ofTerm("leader_acquired_without_lock")); !lockless {
			t.Logf("the term of %s was acquired through the lock", newLeader)
		} else if _, ok := second.TryWaitLogFrom(marks[second], leaseFailover+5*time.Second, ofTerm("leader_lock_won")); !ok {
			t.Errorf("LOCKLESS: the term of %s never took the lock after %s woke (log of %s from line %d: %s)", newLeader, victim.Holder, second.Holder, marks[second], warnings(second.Log()[marks[second]:]))
		}
		// Its next renewal, through the lock, marks the row as a locked
		// term (lease_locked): until then a lock winner would still leave
		// it to expire (finding F1).
		time.Sleep(2 * renewInterval)
		// A new map: the first measure's watchers may still read the old one.
		marks = map[*fleettest.Node]int{}
		for _, n := range nodes {
			marks[n] = n.Mark()
		}
		ep := second.Readyz().Epoch
		epoch0 = max(epoch0, ep)
		victim = second
		sub.setAvoid(victim, true)
		t0 = time.Now()
		victim.Kill()
		failedOver = false
		bound = crashBound
		measure(t0, victim, bound+5*time.Second)
	case faultCut:
		// The victim lives on, cut off from the database (its sessions end:
		// the proxy closes both sides) for 2.5 × lease.
		proxies[victim.Holder].Down()
		bound = lossBound
		measure(t0, victim, stopFor)
		if rest := stopFor - time.Since(t0); rest > 0 {
			time.Sleep(rest)
		}
		proxies[victim.Holder].Up(t)
	case faultRestart, faultTerminate:
		b.serverFault(t, f)
	case faultRebuild:
		// Lock the jobs table, kill the leader, and once the new leader's
		// schedule load waits on the lock, terminate every backend: the
		// fault hits the rebuild, whatever its timing. In claim dispatch
		// the victim is the worker and what waits on the lock the other
		// nodes' claims; no occurrence can re-run while the table is
		// locked, so nothing is timed.
		blocked, release, err := fleettest.BlockJobs(ctx, admin, b.dialect, "sqlease_jobs")
		if err != nil {
			t.Fatalf("locking the jobs table: %v", err)
		}
		sub.setAvoid(victim, true)
		t0 = time.Now()
		victim.Kill()
		if !claim {
			bound = crashBound
			measure(t0, victim, bound+5*time.Second)
		}
		waited := false
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if ok, err := blocked(ctx); err == nil && ok {
				waited = true
				break
			}
		}
		n, err := fleettest.TerminateBackends(ctx, admin, b.dialect)
		release()
		if err != nil {
			t.Fatalf("terminating the backends: %v", err)
		}
		if !waited {
			t.Errorf("no statement waited on the locked jobs table (new leader %s): the fault may have missed the rebuild or the claims", newLeader)
		}
		t.Logf("rebuild fault: new leader %s; its schedule load waited on the lock: %v; terminated %d backends", newLeader, waited, n)
	}
	faultEnd := time.Now()

	// Failover bound.
	if bound > 0 {
		if !failedOver {
			t.Errorf("FAILOVER: no other node acquired the lease (claim dispatch: ran the occurrence in flight) within %v of the %s of %s (bound %v)",
				time.Since(t0).Round(time.Millisecond), f, victim.Holder, bound)
		} else {
			record(b.dialect, mode, f, failover)
			t.Logf("failover %v to %s (bound %v)", failover.Round(time.Millisecond), newLeader, bound)
			if failover > bound {
				t.Errorf("FAILOVER: %s took over %v after the %s of %s; bound %v",
					newLeader, failover.Round(time.Millisecond), f, victim.Holder, bound)
			}
		}
	}

	// The fleet keeps dispatching: a one-off job submitted now runs within
	// the bound.
	var probe string
	for deadline := time.Now().Add(dispatchBound); ; time.Sleep(50 * time.Millisecond) {
		name, ok := sub.submit("probe")
		if ok {
			probe = name
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("NO API: no node accepted a job within %v of the end of the %s", dispatchBound, f)
		}
	}
	probeAt := sub.acceptedJobs()[probe]
	if dl, ok := rc.WaitFor(dispatchBound, func(dl fleettest.Delivery) bool { return dl.Job == probe }); !ok {
		t.Errorf("NOT DISPATCHING: job %s, accepted %v after the %s, did not run within %v; leaders now: %s",
			probe, probeAt.Sub(faultEnd).Round(time.Millisecond), f, dispatchBound, leaders(d.Running()))
	} else {
		recordDispatch(b.dialect, mode, f, dl.Start.Sub(t0))
		t.Logf("probe %s ran %v after the fault began, by %s@%d", probe, dl.Start.Sub(t0).Round(time.Millisecond), dl.Holder, dl.Epoch)
	}

	// Two seconds more of load after recovery, then stop submitting and let
	// every accepted job run.
	time.Sleep(2 * time.Second)
	stopSub()
	wg.Wait()
	accepted := sub.acceptedJobs()
	lost := rc.Unran(accepted, dispatchBound, false)
	if len(lost) > 0 {
		var when []string
		for _, n := range lost {
			when = append(when, fmt.Sprintf("%s (accepted %+v after the fault began)", n, accepted[n].Sub(t0).Round(time.Millisecond)))
		}
		t.Errorf("LOST JOBS: %d of %d accepted one-off jobs never ran: %s", len(lost), len(accepted), strings.Join(when, ", "))
	}
	// The interrupted slow occurrence must be answered, by someone.
	if _, ok := rc.WaitFor(dispatchBound+2*time.Second, func(dl fleettest.Delivery) bool {
		return dl.Key == inflight.Key && !dl.End.IsZero() && !dl.HungUp
	}); !ok {
		t.Errorf("LOST OCCURRENCE: %s, in flight at the fault (%s), was never answered; its deliveries: %v; the nodes' log lines about it:\n%s",
			inflight.Key, inflight, deliveriesOf(rc, inflight.Key), occurrenceLog(d, inflight))
	}
	t.Logf("the occurrence in flight at the fault: %v", deliveriesOf(rc, inflight.Key))
	checkRunAll(t, rc, "tick", time.Second, t0)
	checkAllow(t, rc, d.Running()[0], t0)

	d.Shutdown(15*time.Second, d.Running()...)

	killedAt := func(holder string) time.Time {
		if n := d.Node(holder); n != nil {
			return n.KilledAt()
		}
		return time.Time{}
	}
	for _, o := range rc.Overlaps(killedAt) {
		t.Errorf("OVERLAP: %s (fault %s began %s); the nodes' log lines about it:\n%s", o, f, t0.Format("15:04:05.000"), occurrenceLog(d, o.First))
	}
	if claim {
		// Each claim of a job is an epoch of that job's own (its lock
		// epoch): per job, no send under a claim after a later claim of
		// the job had begun sending.
		byJob := map[string][]ledger.Row{}
		for _, r := range rc.Ledger() {
			job, _, _ := strings.Cut(r.Note, "/")
			if job == allowJob {
				job = r.Note // its occurrences run at once, each under a lock of its own
			}
			byJob[job] = append(byJob[job], r)
		}
		for job, rows := range byJob {
			for _, v := range ledger.Verify(rows, nil) {
				t.Errorf("LEDGER: job %s: %s (deliveries as actions; fault %s began %s)", job, v, f, t0.Format("15:04:05.000"))
			}
		}
		return
	}
	leases, err := ledger.Leases(ctx, admin, "sqlease_leases")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range ledger.Verify(rc.Ledger(), leases) {
		t.Errorf("LEDGER: %s (deliveries as actions; fault %s began %s)", v, f, t0.Format("15:04:05.000"))
	}
}

// checkRunAll fails the test if the run_all job's occurrences have a gap
// (each scheduled_for must follow the previous one by every) or none was
// scheduled after the time after.
func checkRunAll(t *testing.T, rc *fleettest.Receiver, job string, every time.Duration, after time.Time) {
	t.Helper()
	sfs := occurrencesRun(t, rc, job)
	if len(sfs) == 0 || !sfs[len(sfs)-1].After(after) {
		t.Errorf("LOST OCCURRENCES: run_all job %s ran no occurrence scheduled after the fault began (%s); occurrences run: %v",
			job, after.Format(time.RFC3339Nano), sfs)
		return
	}
	for i := 1; i < len(sfs); i++ {
		if gap := sfs[i].Sub(sfs[i-1]); gap != every {
			t.Errorf("LOST OCCURRENCES: run_all job %s: %d occurrence(s) between %s and %s never ran",
				job, int(gap/every)-1, sfs[i-1].Format(time.RFC3339Nano), sfs[i].Format(time.RFC3339Nano))
		}
	}
}

// awaitNoGap waits, at most bound, until the occurrences of job delivered
// so far have no gap. A job that allows overlap runs later occurrences
// while an earlier one waits for its retry (it was in flight on a frozen
// or killed node): that one is late, not lost, until the retry's bound.
func awaitNoGap(t *testing.T, rc *fleettest.Receiver, job string, every, bound time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(bound); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		sfs := occurrencesRun(t, rc, job)
		gap := false
		for i := 1; i < len(sfs) && !gap; i++ {
			gap = sfs[i].Sub(sfs[i-1]) != every
		}
		if !gap {
			return
		}
	}
}

// occurrencesRun returns the scheduled_for of each occurrence of job
// delivered so far, in order.
func occurrencesRun(t *testing.T, rc *fleettest.Receiver, job string) []time.Time {
	t.Helper()
	seen := map[time.Time]bool{}
	for _, dl := range rc.Deliveries() {
		if dl.Job != job {
			continue
		}
		sf, err := time.Parse(time.RFC3339Nano, dl.SF)
		if err != nil {
			t.Errorf("delivery %s: bad Sqlease-Scheduled-For %q", dl, dl.SF)
			continue
		}
		seen[sf] = true
	}
	sfs := make([]time.Time, 0, len(seen))
	for sf := range seen {
		sfs = append(sfs, sf)
	}
	slices.SortFunc(sfs, time.Time.Compare)
	return sfs
}

// occurrenceLog returns the nodes' log lines about dl's occurrence (its
// job and scheduled_for), and every leadership change, in the test's
// order of reading them.
func occurrenceLog(d *fleettest.Daemons, dl fleettest.Delivery) string {
	var lines []fleettest.LogLine
	for _, n := range d.Nodes() {
		for _, l := range n.Log() {
			if l.Str("job") == dl.Job && l.Str("scheduled_for") == dl.SF ||
				strings.HasPrefix(l.Msg, "leader_") && l.Msg != "leader_observed" || l.Msg == "schedule_rebuilt" {
				lines = append(lines, l)
			}
		}
	}
	slices.SortStableFunc(lines, func(a, b fleettest.LogLine) int { return a.Recv.Compare(b.Recv) })
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "    %s\n", l)
	}
	return b.String()
}

func deliveriesOf(rc *fleettest.Receiver, key string) []fleettest.Delivery {
	var out []fleettest.Delivery
	for _, dl := range rc.Deliveries() {
		if dl.Key == key {
			out = append(out, dl)
		}
	}
	return out
}

func leaders(nodes []*fleettest.Node) string {
	var out []string
	for _, n := range nodes {
		r := n.Readyz()
		out = append(out, fmt.Sprintf("%s: %s", n.Holder, r.Body))
	}
	return strings.Join(out, "; ")
}

// --- figures ---

// failovers and dispatch are the times the suites measure, printed by
// TestMain once every test, parallel ones included, has finished.
var failovers, dispatch fleettest.Timings

func record(dialect, mode string, f fault, d time.Duration) {
	failovers.Record(fmt.Sprintf("%s %s %s", dialect, mode, f.in(mode)), d)
}

func recordDispatch(dialect, mode string, f fault, d time.Duration) {
	dispatch.Record(fmt.Sprintf("%s %s %s", dialect, mode, f.in(mode)), d)
}

// logFigures prints the medians measured by the suites.
func logFigures() {
	failovers.Fprint(os.Stdout, "; failover: fault → another node's leader_acquired (claim dispatch: its run of the occurrence in flight)")
	dispatch.Fprint(os.Stdout, "; dispatch: fault → first delivery of a job submitted after it")
}

// warnings lists the warnings and errors among lines, each as its message
// and its reason or error: what a failing check's node said.
func warnings(lines []fleettest.LogLine) string {
	var b strings.Builder
	for _, l := range lines {
		if l.Level != "WARN" && l.Level != "ERROR" {
			continue
		}
		fmt.Fprintf(&b, "\n  %s %s %s", l.Time.Format("15:04:05.000"), l.Level, l.Msg)
		for _, k := range []string{"lease_epoch", "reason", "error"} {
			if v, ok := l.Attrs[k]; ok {
				fmt.Fprintf(&b, " %s=%v", k, v)
			}
		}
	}
	if b.Len() == 0 {
		return "no warnings"
	}
	return b.String()
}
