package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/fleettest"
)

type singletonView struct {
	Name     string          `json:"name"`
	Status   string          `json:"status"`
	Holder   string          `json:"holder"`
	Epoch    int64           `json:"epoch"`
	State    json.RawMessage `json:"state"`
	Restarts int64           `json:"restarts"`
	// LastError and LastErrorAt: why its process last ended on its own.
	LastError   string `json:"last_error"`
	LastErrorAt string `json:"last_error_at"`
}

// singletons lists every singleton through n (GET /v1/singletons).
func (n *node) singletons(t *testing.T) []singletonView {
	var l struct {
		Singletons []singletonView `json:"singletons"`
	}
	n.getJSON(t, "/v1/singletons", &l)
	return l.Singletons
}

func (v singletonView) count(t *testing.T) int {
	var s struct {
		N int `json:"n"`
	}
	if err := json.Unmarshal(v.State, &s); err != nil {
		t.Fatalf("state %s: %v", v.State, err)
	}
	return s.N
}

// A daemon singleton written in bash runs on exactly one node; after kill -9
// of that node alone its process dies with it (no orphan), and another node
// runs it from the last saved state within the failover bound — the count
// never goes backwards.
func TestSingletonProcessFailover(t *testing.T) {
	pg := postgresDB(t)
	for _, b := range []struct {
		backend
		flags []string
	}{{backend{name: "sqlite", db: sqliteDB}, nil}, {backend{name: "postgres", db: pg}, nil},
		{backend{name: "postgres-advisory", db: pg}, []string{"--election", "advisory"}}} {
		t.Run(b.name, func(t *testing.T) {
			script, pids := counterScript(t)
			f := newFleet(t, b.db(t), b.flags...)
			nodes := f.start("a", "b")
			def := fmt.Sprintf(`{"name":"counter","command":["bash",%q],"env":{"PIDS":%q},"initial_state":{"n":0},"heartbeat":"1s","stop_timeout":"2s"}`, script, pids)
			resp, body := nodes[0].do(t, "POST", "/v1/singletons", "", []byte(def))
			if resp.StatusCode != 201 {
				t.Fatalf("create: %d %s", resp.StatusCode, body)
			}
			// Created through a alone: b learns of it at its next re-read of
			// the table (without a change feed), within half a lease, so
			// before a's lease can expire should a die at once.
			var v singletonView
			get := func() singletonView {
				var v singletonView
				nodes[1].getJSON(t, "/v1/singletons/counter", &v)
				return v
			}
			if err := poll(20*time.Second, func() (bool, string) {
				v = get()
				return v.Status == "running" && v.count(t) >= 10, fmt.Sprintf("%+v", v)
			}); err != nil {
				t.Fatal(err)
			}
			holder, other := holderOf(nodes, v.Holder)
			if holder == nil {
				t.Fatalf("holder %q is not a node of the fleet", v.Holder)
			}
			before := get()
			first := fleettest.PIDs(pids) // the killed node's; the next holder may start its own at once
			holder.signal(t, syscall.SIGKILL)
			killed := time.Now()
			holder.wait(t, 5*time.Second)

			// The dead node's process is gone with it.
			if err := poll(3*time.Second, func() (bool, string) {
				for _, pid := range first {
					if fleettest.Alive(pid) {
						return false, fmt.Sprintf("pid %d of the killed node's singleton still runs", pid)
					}
				}
				return true, ""
			}); err != nil {
				t.Fatal(err)
			}

			var after singletonView
			if err := poll(20*time.Second, func() (bool, string) {
				var v singletonView
				other.getJSON(t, "/v1/singletons/counter", &v)
				after = v
				return v.Holder == other.holder && v.Status == "running" && v.count(t) > before.count(t), fmt.Sprintf("%+v", v)
			}); err != nil {
				t.Fatal(err)
			}
			took := time.Since(killed)
			t.Logf("kill -9 of %s: %s runs the singleton (epoch %d → %d) from n=%d, %s later", holder.holder, other.holder,
				before.Epoch, after.Epoch, before.count(t), took)
			if after.Epoch <= before.Epoch {
				t.Fatalf("epoch %d after failover, was %d", after.Epoch, before.Epoch)
			}
			if bound := leaseDuration + acquireInterval + 3*time.Second; took > bound {
				t.Errorf("failover took %s, want within lease + acquire (+ slack) = %s", took, bound)
			}
			// Exactly one copy runs, and stays the only one.
			if err := poll(5*time.Second, func() (bool, string) {
				n := len(fleettest.AlivePIDs(pids))
				return n == 1, fmt.Sprintf("%d copies of the singleton run, want 1", n)
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// SIGSTOP of the node running a singleton past its lease: another node runs
// it; after SIGCONT the frozen node's process is stopped, its saves under
// the old epoch are refused, and the saved count never goes backwards.
// A singleton that stops heart-beating makes its node's /readyz answer 503
// with singleton_stale=<name>, and the status says stale.
func TestSingletonFrozenNodeAndStaleness(t *testing.T) {
	script, pids := counterScript(t)
	db := sqliteDB(t)
	f := newFleet(t, db)
	nodes := f.start("a", "b")
	def := fmt.Sprintf(`{"name":"counter","command":["bash",%q],"env":{"PIDS":%q},"heartbeat":"1s","stop_timeout":"1s"}`, script, pids)
	if resp, body := nodes[0].do(t, "POST", "/v1/singletons", "", []byte(def)); resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	var counts []int // every count read, in order
	var v singletonView
	read := func(n *node) singletonView {
		var v singletonView
		n.getJSON(t, "/v1/singletons/counter", &v)
		if v.State != nil && string(v.State) != "null" {
			counts = append(counts, v.count(t))
		}
		return v
	}
	if err := poll(20*time.Second, func() (bool, string) {
		v = read(nodes[0])
		return v.Status == "running" && len(counts) > 0 && counts[len(counts)-1] >= 5, fmt.Sprintf("%+v", v)
	}); err != nil {
		t.Fatal(err)
	}
	holder, other := holderOf(nodes, v.Holder)
	// Outside its writes: frozen inside one (a save, milliseconds, 20 a
	// second) it would hold the file's write lock, and every other node
	// with it, until it wakes (README, SQLite).
	fleettest.FreezeOutsideWrites(t, holder.PID(), strings.TrimPrefix(db, "sqlite:"))
	if err := poll(20*time.Second, func() (bool, string) {
		v = read(other)
		return v.Holder == other.holder && v.Status == "running", fmt.Sprintf("%+v", v)
	}); err != nil {
		holder.signal(t, syscall.SIGCONT)
		t.Fatal(err)
	}
	time.Sleep(3 * leaseDuration) // frozen well past its lease
	holder.signal(t, syscall.SIGCONT)
	for range 20 {
		read(other)
		time.Sleep(50 * time.Millisecond)
	}
	for i := 1; i < len(counts); i++ {
		if counts[i] < counts[i-1] {
			t.Fatalf("the saved count went backwards: %v", counts)
		}
	}
	if err := poll(5*time.Second, func() (bool, string) {
		n := len(fleettest.AlivePIDs(pids))
		return n == 1, fmt.Sprintf("%d copies run", n)
	}); err != nil {
		t.Fatal(err)
	}

	// A singleton that never heart-beats: stale after the grace.
	quiet := `{"name":"quiet","command":["sleep","3600"],"heartbeat":"300ms","stop_timeout":"1s"}`
	if resp, body := other.do(t, "POST", "/v1/singletons", "", []byte(quiet)); resp.StatusCode != 201 {
		t.Fatalf("create quiet: %d %s", resp.StatusCode, body)
	}
	var runner *node
	if err := poll(20*time.Second, func() (bool, string) {
		var q singletonView
		other.getJSON(t, "/v1/singletons/quiet", &q)
		for _, n := range nodes {
			if n.holder == q.Holder {
				runner = n
			}
		}
		return q.Status == "stale" && runner != nil, fmt.Sprintf("%+v", q)
	}); err != nil {
		t.Fatal(err)
	}
	if err := poll(5*time.Second, func() (bool, string) {
		r := runner.readyz()
		return r.code == 503 && strings.Contains(r.body, "singleton_stale=quiet"), r.String()
	}); err != nil {
		t.Fatal(err)
	}
	// The process API: a wrong token is 401 whatever the epoch — only the
	// run's own token learns that an epoch is no longer current (409), so
	// the answers are no oracle of what runs where; nothing changes.
	var q singletonView
	runner.getJSON(t, "/v1/singletons/quiet", &q)
	call := func(n *node, epoch int64, token string) int {
		req, _ := http.NewRequest("POST", n.url("/v1/singletons/quiet/heartbeat"), nil)
		req.Header.Set("Sqlease-Epoch", strconv.FormatInt(epoch, 10))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := call(runner, q.Epoch, "not-the-token"); got != 401 {
		t.Fatalf("heartbeat with a wrong token: %d, want 401", got)
	}
	if got := call(runner, q.Epoch+1, "not-the-token"); got != 401 {
		t.Fatalf("heartbeat with a wrong token under an epoch not current here: %d, want 401", got)
	}
	code, metrics := runner.get("/metrics")
	if code != 200 || !strings.Contains(metrics, `sqlease_singleton_heartbeat_age_seconds{singleton="quiet"}`) {
		t.Fatalf("metrics lack the heartbeat age of quiet: %d", code)
	}
	// Pausing it stops it everywhere: the node is ready again.
	if resp, body := other.do(t, "POST", "/v1/singletons/quiet/pause", "", []byte(`{}`)); resp.StatusCode != 200 {
		t.Fatalf("pause: %d %s", resp.StatusCode, body)
	}
	if err := poll(10*time.Second, func() (bool, string) {
		r := runner.readyz()
		return r.code == 200, r.String()
	}); err != nil {
		t.Fatal(err)
	}
}

// The state never goes backwards: a counter singleton's saved value keeps
// growing across 20 kill -9 failovers (PostgreSQL, advisory mode, so that
// each takes milliseconds), and one copy runs after each.
func TestSingletonCounterMonotonicAcrossFailovers(t *testing.T) {
	script, pids := counterScript(t)
	f := newFleet(t, postgresDB(t)(t), "--election", "advisory")
	nodes := f.start("n0", "n1")
	def := fmt.Sprintf(`{"name":"counter","command":["bash",%q],"env":{"PIDS":%q},"heartbeat":"1s","stop_timeout":"1s"}`, script, pids)
	if resp, body := nodes[0].do(t, "POST", "/v1/singletons", "", []byte(def)); resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	read := func(via *node) singletonView {
		var v singletonView
		via.getJSON(t, "/v1/singletons/counter", &v)
		return v
	}
	last, seq, epoch := 0, 2, int64(0)
	for i := range 20 {
		var v singletonView
		var holder *node
		// Every state read after the failover is at least the last one seen
		// before it; the new holder counts on from there.
		if err := poll(20*time.Second, func() (bool, string) {
			alive := f.alive()
			v = read(alive[0])
			if v.State != nil && string(v.State) != "null" && v.count(t) < last {
				t.Fatalf("failover %d: the count went back from %d to %d (%+v)", i, last, v.count(t), v)
			}
			holder = nil
			for _, n := range alive {
				if n.holder == v.Holder {
					holder = n
				}
			}
			return holder != nil && v.Epoch > epoch && v.Status == "running" && v.count(t) >= last+3, fmt.Sprintf("%+v", v)
		}); err != nil {
			t.Fatalf("failover %d: %v", i, err)
		}
		last, epoch = v.count(t), v.Epoch
		holder.signal(t, syscall.SIGKILL)
		holder.wait(t, 5*time.Second)
		f.waitUp(f.launch(fmt.Sprintf("n%d", seq)))
		seq++
	}
	if err := poll(10*time.Second, func() (bool, string) {
		n := len(fleettest.AlivePIDs(pids))
		return n == 1, fmt.Sprintf("%d copies run", n)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("count %d after 20 failovers", last)
}

// gracefulScript is a singleton that, on SIGTERM, says so, takes half a
// second to wind up, and says it is done: lines in $OUT.
const gracefulScript = `#!/usr/bin/env bash
trap 'echo term >> "$OUT"; sleep 0.5; echo bye >> "$OUT"; exit 0' TERM
echo up >> "$OUT"
while :; do sleep 0.05; done
`

// A singleton stopped on purpose — paused, or its node shut down — gets
// SIGTERM and its stop_timeout to wind up: the node's guard, which kills a
// frozen node's processes at their deadline, must not cut that short, not
// even when it gets SIGTERM too (systemctl stop signals every process).
func TestSingletonGracefulStop(t *testing.T) {
	dir := t.TempDir()
	script, out := filepath.Join(dir, "graceful.sh"), filepath.Join(dir, "out")
	if err := os.WriteFile(script, []byte(gracefulScript), 0o755); err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, sqliteDB(t))
	nodes := f.start("a")
	def := fmt.Sprintf(`{"name":"graceful","command":["bash",%q],"env":{"OUT":%q},"heartbeat":"1m","stop_timeout":"5s"}`, script, out)
	if resp, body := nodes[0].do(t, "POST", "/v1/singletons", "", []byte(def)); resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	lines := func() string { b, _ := os.ReadFile(out); return strings.Join(strings.Fields(string(b)), " ") }
	if err := poll(20*time.Second, func() (bool, string) { return lines() == "up", lines() }); err != nil {
		t.Fatal(err)
	}
	if resp, body := nodes[0].do(t, "POST", "/v1/singletons/graceful/pause", "", []byte(`{}`)); resp.StatusCode != 200 {
		t.Fatalf("pause: %d %s", resp.StatusCode, body)
	}
	if err := poll(10*time.Second, func() (bool, string) { return lines() == "up term bye", lines() }); err != nil {
		t.Fatalf("pause: the process did not wind up: %v", err)
	}
	if resp, body := nodes[0].do(t, "POST", "/v1/singletons/graceful/resume", "", []byte(`{}`)); resp.StatusCode != 200 {
		t.Fatalf("resume: %d %s", resp.StatusCode, body)
	}
	if err := poll(20*time.Second, func() (bool, string) { return lines() == "up term bye up", lines() }); err != nil {
		t.Fatal(err)
	}
	// As a service manager stops a service: SIGTERM to each of its
	// processes, the node's guard among them.
	guard := fleettest.GuardOf(nodes[0].PID())
	if guard == 0 {
		t.Fatal("the node runs its singleton without a guard")
	}
	nodes[0].signal(t, syscall.SIGTERM)
	if err := syscall.Kill(guard, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	nodes[0].wait(t, 15*time.Second)
	if got := lines(); got != "up term bye up term bye" {
		t.Fatalf("node shutdown: the process did not wind up: %q", got)
	}
}
