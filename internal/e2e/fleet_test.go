package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/internal/pgtest"
)

// TestFleet runs every fleet scenario on three nodes sharing one PostgreSQL
// database and on two nodes sharing one SQLite file, the two fleets in
// parallel.
func TestFleet(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		if os.Getenv(pgtest.URLEnv) == "" && testing.Short() {
			t.Skip(pgtest.URLEnv + " is not set and -short: not starting PostgreSQL")
		}
		t.Parallel()
		scenarios(t, backend{name: "postgres", nodes: 3, db: postgresDB(t)})
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		scenarios(t, backend{name: "sqlite", nodes: 2, db: sqliteDB})
	})
}

func scenarios(t *testing.T, b backend) {
	t.Run("a_one_leader", func(t *testing.T) { testOneLeader(t, b) })
	t.Run("b_failover_after_sigkill", func(t *testing.T) { testFailoverAfterKill(t, b) })
	t.Run("c_handoff_on_sigterm", func(t *testing.T) { testHandoff(t, b) })
	t.Run("c_drain_on_sigterm", func(t *testing.T) { testDrain(t, b) })
	t.Run("d_job_from_follower_runs_on_leader", func(t *testing.T) { testJobFromFollower(t, b) })
}

func holders(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i+1)
	}
	return out
}

// (a) Started at once on a fresh database, the nodes agree on exactly one
// leader, every other node follows it at the same epoch, and that stays so.
func testOneLeader(t *testing.T, b backend) {
	f := newFleet(t, b.db(t))
	nodes := f.start(holders("n", b.nodes)...)
	leader, epoch := waitAgreed(t, nodes, 15*time.Second)
	t.Logf("%d nodes: %s leads at epoch %d", len(nodes), leader.holder, epoch)

	// Leadership stays put over several lease durations (many renewals):
	// never two leaders, no change of leader or epoch without a failure.
	for end := time.Now().Add(2 * leaseDuration); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		l, e, why := agreed(nodes)
		if l != leader || e != epoch {
			t.Fatalf("leadership changed with no failure (was %s at %d): %s", leader.holder, epoch, why)
		}
	}

	for _, n := range nodes {
		// Every node lists the same lease.
		var leases struct {
			Leases []struct {
				Name, Holder, ExpiresAt string
				Epoch                   int64
				Expired                 bool
			} `json:"leases"`
		}
		n.getJSON(t, "/v1/leases", &leases)
		if len(leases.Leases) != 1 || leases.Leases[0].Name != "sqlease-leader" || leases.Leases[0].Holder != leader.holder ||
			leases.Leases[0].Epoch != epoch || leases.Leases[0].Expired {
			t.Errorf("/v1/leases on %s: %+v", n.holder, leases)
		}
		// And the metrics say the same.
		isLeader, lepoch := metric(t, n, "sqlease_is_leader"), metric(t, n, "sqlease_leader_epoch")
		want := 0.0
		if n == leader {
			want = 1
		}
		if isLeader != want || lepoch != float64(epoch) {
			t.Errorf("%s: sqlease_is_leader %v (want %v), sqlease_leader_epoch %v (want %d)", n.holder, isLeader, want, lepoch, epoch)
		}
		if code, body := n.get("/healthz"); code != 200 {
			t.Errorf("/healthz on %s: %d %s", n.holder, code, body)
		}
	}
}

// metric returns the value of an unlabelled metric from n's /metrics.
func metric(t *testing.T, n *node, name string) float64 {
	t.Helper()
	code, body := n.get("/metrics")
	if code != 200 {
		t.Fatalf("/metrics on %s: %d", n.holder, code)
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s on %s: %q", name, n.holder, v)
			}
			return f
		}
	}
	t.Fatalf("/metrics on %s has no %s", n.holder, name)
	return 0
}

// waitNewLeader polls the nodes until one reports mode=leader at an epoch
// above old, and returns it with its epoch and the time it took from since.
func waitNewLeader(t *testing.T, nodes []*node, old int64, since time.Time, timeout time.Duration) (*node, int64, time.Duration) {
	t.Helper()
	var leader *node
	var epoch int64
	var took time.Duration
	err := poll(timeout, func() (bool, string) {
		var desc []string
		for _, n := range nodes {
			r := n.readyz()
			if r.code == 200 && r.mode == "leader" && r.epoch > old {
				leader, epoch, took = n, r.epoch, time.Since(since)
				return true, ""
			}
			desc = append(desc, n.holder+": "+r.String())
		}
		return false, strings.Join(desc, "; ")
	})
	if err != nil {
		t.Fatalf("no new leader above epoch %d: %v", old, err)
	}
	return leader, epoch, took
}

// (b) After kill -9 of the leader, another node leads at a higher epoch
// within lease_duration + acquire_interval + slack. Three times, each with
// a fresh node replacing the killed one.
func testFailoverAfterKill(t *testing.T, b backend) {
	f := newFleet(t, b.db(t))
	nodes := f.start(holders("k", b.nodes)...)
	next := b.nodes + 1
	var times []time.Duration
	for rep := 1; rep <= 3; rep++ {
		leader, epoch := waitAgreed(t, nodes, 15*time.Second)
		others := without(nodes, leader)
		t0 := time.Now()
		leader.signal(t, syscall.SIGKILL)
		newLeader, newEpoch, took := waitNewLeader(t, others, epoch, t0, failoverBound+5*time.Second)
		times = append(times, took)
		t.Logf("%s: kill -9 of %s (epoch %d): %s leads at epoch %d after %v (bound %v)",
			b.name, leader.holder, epoch, newLeader.holder, newEpoch, took.Round(time.Millisecond), failoverBound)
		if took > failoverBound {
			t.Errorf("failover took %v, above the bound %v", took, failoverBound)
		}
		if st := leader.wait(t, 10*time.Second); st != "killed by killed" {
			t.Errorf("killed leader's status: %s", st)
		}
		if l, e := waitAgreed(t, others, 5*time.Second); l != newLeader || e != newEpoch {
			t.Fatalf("survivors agree on %s at %d, not the new leader %s at %d", l.holder, e, newLeader.holder, newEpoch)
		}
		nodes = append(others, f.start(fmt.Sprintf("k%d", next))...)
		next++
	}
	t.Logf("%s: crash failover (SIGKILL to another node's readyz mode=leader), median %v of %v",
		b.name, median(times).Round(time.Millisecond), round(times))
}

// (c) SIGTERM to the leader: it exits 0 after releasing the lease, and
// another node leads at once (no waiting for the lease to expire). Five
// times, each with a fresh node replacing the stopped one.
func testHandoff(t *testing.T, b backend) {
	f := newFleet(t, b.db(t))
	nodes := f.start(holders("h", b.nodes)...)
	next := b.nodes + 1
	var times []time.Duration
	stoppingSeen := 0
	for rep := 1; rep <= 5; rep++ {
		leader, epoch := waitAgreed(t, nodes, 15*time.Second)
		others := without(nodes, leader)

		// Best effort: catch the stopping node's readiness going 503
		// (with no run in flight the drain is short; testDrain makes it
		// long).
		var wg sync.WaitGroup
		var stopping ready
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !leader.exited() {
				if r := leader.readyz(); r.code == http.StatusServiceUnavailable {
					stopping = r
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()

		t0 := time.Now()
		leader.signal(t, syscall.SIGTERM)
		newLeader, newEpoch, took := waitNewLeader(t, others, epoch, t0, failoverBound+5*time.Second)
		times = append(times, took)
		st := leader.wait(t, 15*time.Second)
		wg.Wait()
		t.Logf("%s: SIGTERM to %s (epoch %d): %s leads at epoch %d after %v; %s exited %s; readyz while stopping: %v",
			b.name, leader.holder, epoch, newLeader.holder, newEpoch, took.Round(time.Millisecond), leader.holder, st, stopping)
		if st != "0" {
			t.Errorf("after SIGTERM %s exited %s, want 0", leader.holder, st)
		}
		if stopping.code != 0 {
			stoppingSeen++
			if stopping.mode != "stopping" {
				t.Errorf("stopping node's /readyz: %v", stopping)
			}
		}
		if !strings.Contains(leader.out(), `"msg":"leader_released"`) {
			t.Errorf("%s did not log leader_released", leader.holder)
		}
		if took > failoverBound {
			t.Errorf("handoff took %v, above even the crash failover bound %v", took, failoverBound)
		}
		if l, e := waitAgreed(t, others, 5*time.Second); l != newLeader || e != newEpoch {
			t.Fatalf("survivors agree on %s at %d, not the new leader %s at %d", l.holder, e, newLeader.holder, newEpoch)
		}
		nodes = append(others, f.start(fmt.Sprintf("h%d", next))...)
		next++
	}
	m := median(times)
	t.Logf("%s: SIGTERM handoff (SIGTERM to another node's readyz mode=leader), median %v of %v; 503 mode=stopping observed in %d of 5",
		b.name, m.Round(time.Millisecond), round(times), stoppingSeen)
	// A released lease is taken at the followers' next poll; waiting for
	// it to expire would take up to a lease duration.
	if m >= leaseDuration {
		t.Errorf("median handoff %v is not below the lease duration %v: the lease is not handed over", m, leaseDuration)
	}
}

// (c) SIGTERM to a leader with a run in flight: readiness goes 503
// (mode=stopping) while the run finishes, the lease is held meanwhile, then
// the node exits 0 and another node leads. The run is recorded once,
// succeeded, and not run again.
func testDrain(t *testing.T, b backend) {
	dir := t.TempDir()
	starts, ends := filepath.Join(dir, "starts"), filepath.Join(dir, "ends")
	f := newFleet(t, b.db(t))
	nodes := f.start(holders("d", b.nodes)...)
	leader, epoch := waitAgreed(t, nodes, 15*time.Second)
	others := without(nodes, leader)

	job := map[string]any{
		"name":     "slow",
		"schedule": map[string]any{},
		"action": map[string]any{"exec": map[string]any{
			"command": []string{"/bin/sh", "-c", `echo "$SQLEASE_HOLDER $SQLEASE_EPOCH" >> "$1"; sleep 1.5; echo done >> "$2"`, "sh", starts, ends},
			"timeout": "20s",
		}},
	}
	body, _ := json.Marshal(job)
	if resp, rb := leader.do(t, "POST", "/v1/jobs", "", body); resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /v1/jobs: %d %s", resp.StatusCode, rb)
	}
	if err := poll(10*time.Second, func() (bool, string) { return lines(starts) == 1, "the run did not start" }); err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	leader.signal(t, syscall.SIGTERM)
	var stopping ready
	if err := poll(5*time.Second, func() (bool, string) {
		stopping = leader.readyz()
		return stopping.code == http.StatusServiceUnavailable, stopping.String()
	}); err != nil {
		t.Fatalf("stopping leader's /readyz never answered 503: %v", err)
	}
	if stopping.mode != "stopping" {
		t.Errorf("stopping leader's /readyz: %v", stopping)
	}
	// While it drains, it still holds the lease: nobody else leads.
	if lines(ends) == 0 {
		for _, o := range others {
			if r := o.readyz(); r.mode != "follower" || r.leader != leader.holder || r.epoch != epoch {
				t.Errorf("while %s drains, %s says %v", leader.holder, o.holder, r)
			}
		}
	}
	if st := leader.wait(t, 15*time.Second); st != "0" {
		t.Errorf("after SIGTERM %s exited %s, want 0", leader.holder, st)
	}
	if n := lines(ends); n != 1 {
		t.Errorf("the in-flight run did not finish (ends: %d lines)", n)
	}
	newLeader, newEpoch, took := waitNewLeader(t, others, epoch, t0, failoverBound+5*time.Second)
	t.Logf("%s: SIGTERM with a 1.5 s run in flight: readyz %v; %s leads at epoch %d after %v",
		b.name, stopping, newLeader.holder, newEpoch, took.Round(time.Millisecond))

	// The new leader has built its schedule: the finished one-off job is
	// not in it and does not run again.
	if err := poll(5*time.Second, func() (bool, string) {
		return strings.Contains(newLeader.out(), `"msg":"schedule_rebuilt","lease_epoch":`+strconv.FormatInt(newEpoch, 10)+`,`),
			"no schedule_rebuilt at the new epoch in the new leader's log"
	}); err != nil {
		t.Fatal(err)
	}
	var runs httpapi.RunList
	newLeader.getJSON(t, "/v1/jobs/slow/runs", &runs)
	if len(runs.Runs) != 1 || runs.Runs[0].Outcome != "succeeded" || runs.Runs[0].Holder != leader.holder || runs.Runs[0].Epoch != epoch {
		t.Errorf("runs of slow: %+v", runs)
	}
	if n := lines(starts); n != 1 {
		t.Errorf("slow ran %d times", n)
	}
}

func lines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

// waitRun waits until n shows exactly one run of job, finished, and
// returns it.
func waitRun(t *testing.T, n *node, job string) httpapi.RunList {
	t.Helper()
	var runs httpapi.RunList
	err := poll(10*time.Second, func() (bool, string) {
		code, body := n.get("/v1/jobs/" + job + "/runs")
		runs = httpapi.RunList{}
		if code != 200 || json.Unmarshal([]byte(body), &runs) != nil {
			return false, fmt.Sprintf("%d %s", code, body)
		}
		return len(runs.Runs) == 1 && runs.Runs[0].FinishedAt != nil, body
	})
	if err != nil {
		t.Fatalf("runs of %s on %s: %v", job, n.holder, err)
	}
	return runs
}

// (d) A job created through a follower runs on the leader, once, with the
// run's identity in the request headers (HTTP action) or the environment
// (exec action); every node's runs endpoint shows it succeeded.
func testJobFromFollower(t *testing.T, b backend) {
	type hit struct {
		method, path, body string
		header             http.Header
	}
	hits := make(chan hit, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		hits <- hit{r.Method, r.URL.RequestURI(), string(body), r.Header.Clone()}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	f := newFleet(t, b.db(t))
	nodes := f.start(holders("j", b.nodes)...)
	leader, epoch := waitAgreed(t, nodes, 15*time.Second)
	followers := without(nodes, leader)

	// HTTP action, created through the first follower.
	created := time.Now()
	job := `{"name": "hook-once", "schedule": {},
		"action": {"http": {"url": "` + srv.URL + `/hook?src=e2e", "method": "PUT",
			"headers": {"X-Team": "billing", "Sqlease-Epoch": "forged"}, "body": "{\"hello\": \"world\"}", "timeout": "5s"}}}`
	resp, rb := followers[0].do(t, "POST", "/v1/jobs", "", []byte(job))
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Location") != "/v1/jobs/hook-once" {
		t.Fatalf("POST /v1/jobs on follower %s: %d %v %s", followers[0].holder, resp.StatusCode, resp.Header, rb)
	}
	var h hit
	select {
	case h = <-hits:
	case <-time.After(15 * time.Second):
		t.Fatal("the HTTP action was not called within 15s")
	}
	sf := h.header.Get("Sqlease-Scheduled-For")
	at, err := time.Parse(time.RFC3339Nano, sf)
	if err != nil || at.UTC().Format(time.RFC3339Nano) != sf || !strings.HasSuffix(sf, "Z") {
		t.Errorf("Sqlease-Scheduled-For %q is not RFC 3339 with nanoseconds in UTC (%v)", sf, err)
	}
	if at.Before(created.Add(-time.Minute)) || at.After(time.Now().Add(time.Minute)) {
		t.Errorf("Sqlease-Scheduled-For %v is not about the creation time %v", at, created)
	}
	for name, want := range map[string]string{
		"Idempotency-Key": "hook-once/" + sf,
		"Sqlease-Job":     "hook-once",
		"Sqlease-Attempt": "1",
		"Sqlease-Epoch":   strconv.FormatInt(epoch, 10),
		"Sqlease-Holder":  leader.holder,
		"X-Team":          "billing",
	} {
		if got := h.header.Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("header %s: %q, want %q", name, got, want)
		}
	}
	if h.method != "PUT" || h.path != "/hook?src=e2e" || h.body != `{"hello": "world"}` {
		t.Errorf("request: %s %s %q", h.method, h.path, h.body)
	}
	for _, n := range nodes {
		runs := waitRun(t, n, "hook-once")
		r := runs.Runs[0]
		if r.Outcome != "succeeded" || r.Attempt != 1 || r.Holder != leader.holder || r.Epoch != epoch ||
			r.ScheduledFor != sf || r.IdempotencyKey != "hook-once/"+sf || r.Error != "" {
			t.Errorf("run of hook-once on %s: %+v", n.holder, r)
		}
	}

	// Exec action, created through the last follower: its environment
	// carries the run's identity, its node's API and run token (v2), and
	// none of the daemon's SQLEASE_*.
	out := filepath.Join(t.TempDir(), "env")
	job = fmt.Sprintf(`{"name": "env-once", "schedule": {}, "action": {"exec": {"command":
		["/bin/sh", "-c", "env > \"$1.tmp\" && mv \"$1.tmp\" \"$1\"", "sh", %q]}}}`, out)
	last := followers[len(followers)-1]
	if resp, rb := last.do(t, "POST", "/v1/jobs", "", []byte(job)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /v1/jobs on follower %s: %d %s", last.holder, resp.StatusCode, rb)
	}
	if err := poll(15*time.Second, func() (bool, string) {
		_, err := os.Stat(out)
		return err == nil, "the exec action did not write its environment"
	}); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(out)
	env := map[string]string{}
	for _, kv := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "SQLEASE_") {
			env[k] = v
		}
	}
	esf := env["SQLEASE_SCHEDULED_FOR"]
	if at, err := time.Parse(time.RFC3339Nano, esf); err != nil || at.UTC().Format(time.RFC3339Nano) != esf {
		t.Errorf("SQLEASE_SCHEDULED_FOR %q is not RFC 3339 with nanoseconds in UTC (%v)", esf, err)
	}
	// The run's secret for its node's checkpoint route (v2): this
	// attempt's alone, 24 random bytes in hex; compared apart.
	if tok := env["SQLEASE_RUN_TOKEN"]; len(tok) != 48 || strings.Trim(tok, "0123456789abcdef") != "" {
		t.Errorf("SQLEASE_RUN_TOKEN %q is not 48 hex digits", tok)
	}
	delete(env, "SQLEASE_RUN_TOKEN")
	want := map[string]string{
		"SQLEASE_API":             "http://" + leader.addr,
		"SQLEASE_IDEMPOTENCY_KEY": "env-once/" + esf,
		"SQLEASE_JOB":             "env-once",
		"SQLEASE_SCHEDULED_FOR":   esf,
		"SQLEASE_ATTEMPT":         "1",
		"SQLEASE_EPOCH":           strconv.FormatInt(epoch, 10),
		"SQLEASE_HOLDER":          leader.holder,
	}
	if fmt.Sprint(env) != fmt.Sprint(want) { // fmt sorts map keys
		t.Errorf("exec environment's SQLEASE_* variables:\n got %v\nwant %v", env, want)
	}
	for _, n := range nodes {
		r := waitRun(t, n, "env-once").Runs[0]
		if r.Outcome != "succeeded" || r.Holder != leader.holder || r.Epoch != epoch || r.ScheduledFor != esf {
			t.Errorf("run of env-once on %s: %+v", n.holder, r)
		}
	}

	// Once: the HTTP action was called exactly once.
	select {
	case h := <-hits:
		t.Errorf("the HTTP action was called again: %+v", h)
	default:
	}
}
