package failover

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/internal/mysqltest"
	"github.com/sqlease/sqlease/internal/pgtest"
)

// hit is one action request received from a node.
type hit struct {
	At           time.Time // arrival, local clock
	Epoch        int64
	Holder       string
	Job          string
	ScheduledFor time.Time // the occurrence (database time)
	Attempt      int
}

// hitOf reads what an action request says of its run, and its body.
func hitOf(req *http.Request) hit {
	h := hit{At: time.Now(), Holder: req.Header.Get("Sqlease-Holder"), Job: req.Header.Get("Sqlease-Job")}
	h.Epoch, _ = strconv.ParseInt(req.Header.Get("Sqlease-Epoch"), 10, 64)
	h.Attempt, _ = strconv.Atoi(req.Header.Get("Sqlease-Attempt"))
	h.ScheduledFor, _ = time.Parse(time.RFC3339Nano, req.Header.Get("Sqlease-Scheduled-For"))
	_, _ = io.Copy(io.Discard, req.Body)
	return h
}

// holdServer is an action endpoint that keeps every request open until the
// test releases it: a run in flight on its worker.
type holdServer struct {
	url     string
	arrived fleettest.Log[hit]
	release chan struct{}
}

func newHoldServer(t *testing.T) *holdServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &holdServer{url: "http://" + l.Addr().String() + "/hold", release: make(chan struct{})}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := hitOf(r)
		s.arrived.Add(func(int) hit { return h })
		select {
		case <-s.release:
		case <-r.Context().Done(): // the worker died
		case <-time.After(30 * time.Second):
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

// wait returns the n-th arrival (from 0), waiting up to timeout.
func (s *holdServer) wait(n int, timeout time.Duration) (hit, bool) {
	return s.arrived.TryWait(n, timeout, func(hit) bool { return true })
}

func (s *holdServer) count() int { return s.arrived.Len() }

// claimWorkerFault runs two claim-mode nodes and one job whose run the
// action endpoint holds open, then kills (SIGKILL) or freezes (SIGSTOP) the
// worker running it: the other worker must run the occurrence again within
// lease + acquire interval (+ slack) — its claim is tied to the dead
// worker's own lease — not after the job's lock_timeout of one minute; a
// frozen worker, woken after 2.5 × lease, must send nothing more.
func claimWorkerFault(t *testing.T, db string, sig syscall.Signal) time.Duration {
	t.Helper()
	const lease, acquire = 2 * time.Second, 200 * time.Millisecond
	c := newCluster(t, db, "lease", append([]string{"--dispatch", "claim"}, frozenArgs...)...)
	a := c.launch()
	c.launch()
	hold := newHoldServer(t)
	body := fmt.Sprintf(`{"name":"held","schedule":{},"lock_timeout":"1m","retry":{"max_attempts":3},`+
		`"action":{"http":{"url":%q,"timeout":"1m"}}}`, hold.url)
	resp, err := http.Post("http://"+a.Addr+"/v1/jobs", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("creating the job: %s: %s", resp.Status, b)
	}
	first, ok := hold.wait(0, 15*time.Second)
	if !ok {
		t.Fatal("the job's run did not arrive within 15s")
	}
	victim := c.node(first.Holder)
	if victim == nil {
		t.Fatalf("run from %q, not a node of this cluster", first.Holder)
	}
	t0 := time.Now()
	if path, ok := strings.CutPrefix(db, "sqlite:"); ok && sig == syscall.SIGSTOP {
		t0 = fleettest.FreezeOutsideWrites(t, victim.PID(), path)
	} else {
		victim.signal(sig)
	}
	again, ok := hold.wait(1, lease+acquire+30*time.Second)
	if !ok {
		t.Fatalf("%s of worker %s mid-run: the occurrence did not run again", sig, victim.id)
	}
	took := again.At.Sub(t0)
	if again.Holder == victim.id || !again.ScheduledFor.Equal(first.ScheduledFor) || again.Attempt <= first.Attempt {
		t.Errorf("re-run %+v, want the same occurrence as %+v by the other worker under a later attempt", again, first)
	}
	if bound := lease + acquire + 2300*time.Millisecond; took > bound {
		t.Errorf("%s of worker %s mid-run → re-run after %s, want ≤ lease + acquire (+ slack) = %s (the job's lock_timeout is 1m)", sig, victim.id, took, bound)
	}
	close(hold.release)
	// The workers' own leases log as such, never as leadership.
	sawWorkerLease := false
	for _, n := range c.all() {
		for _, line := range strings.Split(n.Stderr(), "\n") {
			if strings.Contains(line, `"msg":"leader_`) && strings.Contains(line, `"worker:`) {
				t.Errorf("node %s logs its worker lease as leadership: %s", n.id, line)
			}
			sawWorkerLease = sawWorkerLease || strings.Contains(line, `"msg":"worker_lease_acquired"`)
		}
	}
	if !sawWorkerLease {
		t.Error("no node logged worker_lease_acquired")
	}
	if sig == syscall.SIGSTOP {
		time.Sleep(max(5*lease/2-time.Since(t0), 0))
		n := hold.count()
		victim.signal(syscall.SIGCONT)
		time.Sleep(2 * time.Second)
		late := hold.arrived.All()[n:]
		for _, h := range late {
			if h.Holder == victim.id {
				t.Errorf("after waking, worker %s sent the action again: %+v", victim.id, h)
			}
		}
	}
	return took
}

// TestClaimWorkerFault: in claim mode a worker killed or frozen mid-run
// loses its claim with its own lease, on PostgreSQL, MariaDB and SQLite. The
// databases run in parallel (each fleet has a database of its own; the
// bound's slack is 2.3 s), the two faults on each one after the other.
func TestClaimWorkerFault(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and sqlease processes")
	}
	signals := []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP}
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		for _, sig := range signals {
			t.Run(sig.String(), func(t *testing.T) {
				t.Logf("claim mode, PostgreSQL, %s of the worker mid-run → re-run after %s", sig, claimWorkerFault(t, pgtest.CreateDatabase(t, serverURL(t)), sig))
			})
		}
	})
	t.Run("mysql", func(t *testing.T) {
		url := os.Getenv(mysqltest.URLEnv)
		if url == "" {
			t.Skip(mysqltest.URLEnv + " is not set: scripts/test.sh starts a MariaDB and sets it")
		}
		t.Parallel()
		for _, sig := range signals {
			t.Run(sig.String(), func(t *testing.T) {
				t.Logf("claim mode, MariaDB, %s of the worker mid-run → re-run after %s", sig, claimWorkerFault(t, mysqltest.CreateDatabase(t, url), sig))
			})
		}
	})
	// Both nodes on one file. A process frozen inside a write transaction
	// holds every other writer off until it wakes (SQLite's lock): the
	// worker is frozen mid-run, its handler waiting on the action, and
	// outside its writes (FreezeOutsideWrites: a lease renewal or a claim
	// holds the lock for milliseconds, and one freeze in a CI run hit one).
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		for _, sig := range signals {
			t.Run(sig.String(), func(t *testing.T) {
				db := "sqlite:" + filepath.Join(t.TempDir(), "claim.db")
				t.Logf("claim mode, SQLite, %s of the worker mid-run → re-run after %s", sig, claimWorkerFault(t, db, sig))
			})
		}
	})
}
