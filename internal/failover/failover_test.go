package failover

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/internal/pgtest"
)

// jobCount every-100ms jobs at staggered phases: an action due every 20 ms.
const jobCount = 5

// shortLease are lease-mode settings for fast failover.
var shortLease = []string{"--lease-duration", "1s", "--renew-interval", "250ms", "--acquire-interval", "100ms"}

// serverURL returns the URL of a PostgreSQL server to create databases on:
// SQLEASE_TEST_POSTGRES_URL's (scripts/test.sh starts one) or a private one.
func serverURL(t *testing.T) string {
	t.Helper()
	return pgtest.Shared(t)()
}

// actingCluster starts three nodes on database db and the jobs, and waits
// until the leader acts.
func actingCluster(t *testing.T, db, mode string, args ...string) *cluster {
	t.Helper()
	c := newCluster(t, db, mode, args...)
	first := c.launch()
	c.launch()
	c.launch()
	c.addJobs(first, jobCount)
	c.leaderNow(15 * time.Second)
	return c
}

// TestAdvisoryFailover is the always-on check of advisory mode's point: a
// follower acts quickly after the leader is SIGKILLed (the database frees
// the dead session's lock; no lease expiry is waited for) or stops
// gracefully. The bounds are generous (CI machines are slow); the figures
// are in TestFigures.
func TestAdvisoryFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and sqlease processes")
	}
	advisoryHandoffs(t, actingCluster(t, pgtest.CreateDatabase(t, serverURL(t)), "advisory"))
}

// advisoryHandoffs SIGKILLs then SIGTERMs c's acting leader: another node
// must act within 2 s each time (the lease lasts 6 s, so a lease-expiry
// takeover cannot pass), and no older epoch may act after a newer one.
func advisoryHandoffs(t *testing.T, c *cluster) {
	t.Helper()
	const bound = 2 * time.Second
	kill := c.handoff(syscall.SIGKILL, 15*time.Second)
	t.Logf("kill -9 %s → %s acts after %v (leader_acquired %v, schedule_rebuilt %v)", kill.From, kill.To, kill.Total, kill.Acquired, kill.Rebuilt)
	if kill.Total > bound {
		t.Errorf("advisory failover after kill -9 took %v, want < %v", kill.Total, bound)
	}
	term := c.handoff(syscall.SIGTERM, 15*time.Second)
	t.Logf("SIGTERM %s → %s acts after %v (released %v, leader_acquired %v, schedule_rebuilt %v)", term.From, term.To, term.Total, term.Released, term.Acquired, term.Rebuilt)
	if term.Total > bound {
		t.Errorf("advisory graceful handoff took %v, want < %v", term.Total, bound)
	}
	c.checkSingleActor()
}

// TestAdvisoryFailoverMySQL is TestAdvisoryFailover on MariaDB/MySQL, where
// the session lock is GET_LOCK.
func TestAdvisoryFailoverMySQL(t *testing.T) {
	advisoryHandoffs(t, actingCluster(t, dbtest.MySQLURL(t), "advisory"))
}

// TestAdvisoryIdleCost checks that three idle advisory nodes cost the
// database little: the followers wait blocked in pg_advisory_lock instead of
// polling, reading the lease row only when it is due to expire (about once
// per lease duration, to replace a frozen leader). Expected ≈ 1.2
// statements/s with the defaults: the leader's renewals (0.5/s), the two
// followers' reads (≈ 0.15/s each, each after a pgx pool ping), the
// leader's fallback schedule refresh every 30 s (it refreshes on job-change
// notifications). The count is exact (log_statement on a private server),
// so the window can be short.
func TestAdvisoryIdleCost(t *testing.T) {
	idleBound(t, idleGoal{mode: "advisory", window: 6 * time.Second,
		most: 5, expected: "expected ≈ 1", followers: 1, followersExpected: "expected 0.2", suspect: "do they poll?"})
}

// idleGoal is what three idle nodes of one mode, with the defaults, may
// cost the database.
type idleGoal struct {
	mode              string
	window            time.Duration // measured for this long
	most              float64       // statements/s of the three nodes
	expected          string        // what they are expected to cost
	followers         float64       // statements/s of the two followers
	followersExpected string
	suspect           string // what followers over their bound do wrong
}

// idleBound measures g's nodes on a private server and fails the test when
// they cost more than g allows.
func idleBound(t *testing.T, g idleGoal) {
	t.Helper()
	srv, csvPath := idleServer(t)
	res := measureIdle(t, srv.URL(), csvPath, g.mode+", defaults", g.mode, 2*time.Second, g.window)
	t.Logf("3 idle %s nodes: %.2f statements/s\n%s", g.mode, res.stmts, idleTable([]idleCost{res}))
	if res.stmts > g.most {
		t.Errorf("3 idle %s nodes cost %.2f statements/s, want ≤ %.1f (%s)", g.mode, res.stmts, g.most, g.expected)
	}
	if f := res.followers(); f > g.followers {
		t.Errorf("two idle %s followers cost %.2f statements/s, want ≤ %.1f (%s): %s", g.mode, f, g.followers, g.followersExpected, g.suspect)
	}
}

// TestFigures measures failover and idle cost and prints them as tables.
// It takes several minutes: run it with SQLEASE_FAILOVER_FIGURES=1 and -v.
func TestFigures(t *testing.T) {
	if os.Getenv("SQLEASE_FAILOVER_FIGURES") != "1" {
		t.Skip("set SQLEASE_FAILOVER_FIGURES=1 to measure (several minutes)")
	}
	reps := fleettest.EnvInt(t, "SQLEASE_FAILOVER_REPS", 9)
	window := fleettest.EnvDuration(t, "SQLEASE_FAILOVER_IDLE_WINDOW", 30*time.Second)
	srv, csvPath := statsServer(t)
	t.Logf("sqlease binary %s (race-instrumented: %v); %d repetitions; idle window %v; %s", bin, raceEnabled, reps, window, loadavg())
	t.Cleanup(func() {
		t.Logf("at the end: %s (timings on a loaded machine are not the product's: compare with runtime.NumCPU)", loadavg())
	})

	type scenario struct {
		label   string
		mode    string
		args    []string
		sig     syscall.Signal
		reps    int
		timeout time.Duration
	}
	scenarios := []scenario{
		{"advisory, kill -9 (goal ≤ 100 ms)", "advisory", nil, syscall.SIGKILL, reps, 10 * time.Second},
		{"advisory, SIGTERM (goal ≤ 20 ms)", "advisory", nil, syscall.SIGTERM, reps, 10 * time.Second},
		{"lease 1s/250ms/100ms, kill -9", "lease", shortLease, syscall.SIGKILL, reps, 10 * time.Second},
		{"lease 1s/250ms/100ms, SIGTERM", "lease", shortLease, syscall.SIGTERM, reps, 10 * time.Second},
		{"lease defaults 6s/2s/1s, kill -9", "lease", nil, syscall.SIGKILL, max(2, reps/4), 30 * time.Second},
		{"lease defaults 6s/2s/1s, SIGTERM", "lease", nil, syscall.SIGTERM, max(3, reps/3), 30 * time.Second},
	}
	var rows [][]string
	var steady []time.Duration
	for _, sc := range scenarios {
		var samples []sample
		t.Run(sc.label, func(t *testing.T) {
			c := actingCluster(t, pgtest.CreateDatabase(t, srv.URL()), sc.mode, sc.args...)
			if steady == nil {
				// The delivered granularity, before any handoff.
				time.Sleep(time.Second)
				steady = gaps(c.rec.Deliveries())
			}
			for i := range sc.reps {
				s := c.handoff(sc.sig, sc.timeout)
				t.Logf("#%d %s → %s: acts %v; acquired %v, rebuilt %v, due-wait %v, released %v", i+1, s.From, s.To,
					s.Total.Round(10*time.Microsecond), s.Acquired.Round(10*time.Microsecond), s.Rebuilt.Round(10*time.Microsecond),
					s.DueWait.Round(10*time.Microsecond), s.Released.Round(10*time.Microsecond))
				samples = append(samples, s)
			}
			c.checkSingleActor()
		})
		if len(samples) == 0 {
			continue
		}
		pick := func(f func(sample) time.Duration) string {
			var ds []time.Duration
			for _, s := range samples {
				ds = append(ds, f(s))
			}
			return summarize(ds).String()
		}
		released := "-"
		if sc.sig == syscall.SIGTERM {
			released = pick(func(s sample) time.Duration { return s.Released })
		}
		rows = append(rows, []string{sc.label, strconv.Itoa(len(samples)),
			pick(func(s sample) time.Duration { return s.Total }),
			pick(func(s sample) time.Duration { return s.Total - s.DueWait }),
			released,
			pick(func(s sample) time.Duration { return s.Acquired }),
			pick(func(s sample) time.Duration { return s.Rebuilt - s.Acquired }),
			pick(func(s sample) time.Duration { return s.Total - s.Rebuilt }),
			pick(func(s sample) time.Duration { return s.DueWait }),
		})
	}
	if len(rows) > 0 {
		t.Logf("\nFailover, 3 nodes, %d every-100ms jobs at staggered phases (one action due every %v; delivered gap median/min/max %s ms).\n"+
			"Times in ms from the signal to the leader: median (min–max).\n"+
			"  acts: first action request with a higher epoch; acts−due: acts less the due-wait (the handoff's own share);\n"+
			"  released: old leader's leader_released (graceful);\n"+
			"  acquired: new leader's leader_acquired; rebuild: acquired → schedule_rebuilt;\n"+
			"  rebuilt→act: schedule_rebuilt → first action; due-wait: part of it spent waiting for the next occurrence to fall due.\n\n%s",
			jobCount, 100*time.Millisecond/jobCount, summarize(steady),
			table([]string{"scenario", "n", "acts", "acts−due", "released", "acquired", "rebuild", "rebuilt→act", "due-wait"}, rows))
	}

	// The election alone, on a fleet without jobs: no executor load on the
	// machine while the nodes hand over.
	var erows [][]string
	for _, sc := range []struct {
		label string
		sig   syscall.Signal
	}{{"advisory, kill -9, no jobs", syscall.SIGKILL}, {"advisory, SIGTERM, no jobs", syscall.SIGTERM}} {
		var ds []time.Duration
		t.Run(sc.label, func(t *testing.T) {
			c := newCluster(t, pgtest.CreateDatabase(t, srv.URL()), "advisory")
			for range 3 {
				c.launch()
			}
			waitAnyLeader(t, c, 30*time.Second)
			for range reps {
				ds = append(ds, c.electionHandoff(sc.sig, 10*time.Second))
			}
		})
		if len(ds) > 0 {
			erows = append(erows, []string{sc.label, strconv.Itoa(len(ds)), summarize(ds).String()})
		}
	}
	if len(erows) > 0 {
		t.Logf("\nElection only (3 nodes, no jobs): signal → another node's leader_acquired, ms: median (min–max).\n\n%s",
			table([]string{"scenario", "n", "acquired"}, erows))
	}

	type idle struct {
		label, mode string
		args        []string
	}
	idles := []idle{
		{"advisory, defaults", "advisory", nil},
		{"advisory, --renew-interval 3s", "advisory", []string{"--renew-interval", "3s"}},
		{"lease, defaults", "lease", nil},
	}
	var costs []idleCost
	for _, c := range idles {
		t.Run("idle "+c.label, func(t *testing.T) {
			costs = append(costs, measureIdle(t, srv.URL(), csvPath, c.label, c.mode, idleSettle, window, c.args...))
		})
	}
	if len(costs) == 0 {
		return
	}
	t.Logf("\nWhat three idle nodes (no jobs) cost the database, per second, over %v after a %v settle\n"+
		"(node database only; the measuring connection uses another database; autovacuum off).\n\n%s", window, idleSettle, idleTable(costs))
}

// loadavg describes the machine's load, which the timings depend on: other
// processes competing for the CPUs delay every wake-up in the chain.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return fmt.Sprintf("%d CPUs", runtime.NumCPU())
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return fmt.Sprintf("%d CPUs", runtime.NumCPU())
	}
	return fmt.Sprintf("load average %s %s %s on %d CPUs", f[0], f[1], f[2], runtime.NumCPU())
}
