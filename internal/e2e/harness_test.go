package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/internal/pgtest"
	"github.com/sqlease/sqlease/internal/testserver"
)

// binary is the sqlease command TestMain built.
var binary string

func TestMain(m *testing.M) {
	os.Exit(fleettest.Main(m, "e2e", true, os.Getenv("SQLEASE_E2E_RACE") != "", &binary))
}

// Timings of every node: crash failover is bounded by lease duration +
// acquire interval × (1 + 20% jitter); slack absorbs a loaded machine.
const (
	leaseDuration   = 1 * time.Second
	renewInterval   = 250 * time.Millisecond
	acquireInterval = 100 * time.Millisecond
	refreshInterval = 100 * time.Millisecond
	slack           = 3 * time.Second

	failoverBound = leaseDuration + acquireInterval*12/10 + slack
)

// --- databases ---

// backend is where a test's fleet keeps its state.
type backend struct {
	name  string
	nodes int                       // fleet size for this backend
	db    func(t *testing.T) string // a fresh database URL for t
}

// postgresDB returns a function giving each test a fresh database on
// $SQLEASE_TEST_POSTGRES_URL, else on a private server started (once, on
// first use) for the calling top-level test t.
func postgresDB(t *testing.T) func(t *testing.T) string {
	server := pgtest.Shared(t)
	return func(sub *testing.T) string { return pgtest.CreateDatabase(sub, server()) }
}

func sqliteDB(t *testing.T) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "sqlease.db")
}

// --- nodes ---

// node is one "sqlease serve" process of the shared harness
// (internal/fleettest), with this package's HTTP helpers.
type node struct {
	*fleettest.Node
	holder string
	addr   string // host:port of its HTTP API, once up
}

// fleet is the nodes of one test on one database: internal/fleettest's
// Daemons, each node with this package's timings. Its cleanup kills the
// nodes still running, fails the test on a data race or panic in a node's
// log and, if the test failed, logs each node's log.
type fleet struct {
	t     *testing.T
	d     *fleettest.Daemons
	mu    sync.Mutex
	nodes []*node
}

func newFleet(t *testing.T, db string, extra ...string) *fleet {
	flags := append([]string{
		"--lease-duration", leaseDuration.String(),
		"--renew-interval", renewInterval.String(),
		"--acquire-interval", acquireInterval.String(),
		"--schedule-refresh-interval", refreshInterval.String(),
	}, extra...)
	d := fleettest.NewDaemons(t, binary, db, flags...)
	// Not for the exec actions to see: they get none of the daemon's SQLEASE_*.
	d.Env = []string{"SQLEASE_LOG_LEVEL=info"}
	return &fleet{t: t, d: d}
}

func (f *fleet) all() []*node {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.nodes)
}

// alive returns the nodes whose process still runs.
func (f *fleet) alive() []*node { return fleettest.Unexited(f.all()) }

// start launches nodes with the given holder ids at once and waits until
// each answers /readyz with 200.
func (f *fleet) start(holders ...string) []*node {
	f.t.Helper()
	nodes := make([]*node, len(holders))
	for i, h := range holders {
		nodes[i] = f.launch(h)
	}
	for i, n := range nodes {
		nodes[i] = f.waitUp(n)
	}
	return nodes
}

// launch starts one node on a port of its own without waiting for it.
func (f *fleet) launch(holder string, extra ...string) *node {
	f.t.Helper()
	n := &node{Node: f.d.Launch(holder, extra...), holder: holder}
	f.mu.Lock()
	f.nodes = append(f.nodes, n)
	f.mu.Unlock()
	return n
}

// waitUp waits until n has said where it listens and answers /readyz with
// 200.
func (f *fleet) waitUp(n *node) *node {
	f.t.Helper()
	err := poll(20*time.Second, func() (bool, string) {
		if n.exited() {
			return true, ""
		}
		if n.addr == "" {
			l, ok := n.TryWaitLogFrom(0, 0, func(l fleettest.LogLine) bool { return l.Msg == "node_started" })
			if !ok {
				return false, "no node_started yet"
			}
			n.addr = l.Str("http")
			n.Addr = n.addr
		}
		code, body := n.get("/readyz")
		return code == 200, fmt.Sprintf("/readyz: %d %s", code, body)
	})
	switch {
	case err != nil:
		f.t.Fatalf("node %s not ready: %v\n%s", n.holder, err, n.out())
	case n.exited():
		f.t.Fatalf("node %s exited while starting (%s):\n%s", n.holder, n.status(), n.out())
	}
	return n
}

// nodeEnv is the test's environment without SQLEASE_* variables (so that
// only the flags configure a node), plus one setting the exec actions must
// not see; what a fleet's nodes get.
func nodeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SQLEASE_") {
			env = append(env, kv)
		}
	}
	return append(env, "SQLEASE_LOG_LEVEL=info")
}

func (n *node) exited() bool { return n.Exited() }

func (n *node) status() string { return n.Status() }

// out is what the node has logged (its stderr) so far.
func (n *node) out() string { return n.Stderr() }

func (n *node) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	n.Signal(sig)
}

// wait waits for n to exit and returns its status.
func (n *node) wait(t *testing.T, timeout time.Duration) string {
	t.Helper()
	if !n.WaitExit(timeout) {
		t.Fatalf("node %s did not exit within %v", n.holder, timeout)
	}
	return n.status()
}

// --- HTTP ---

var client = &http.Client{
	Timeout:   2 * time.Second,
	Transport: &http.Transport{DisableKeepAlives: true},
}

// url is the URL of path on the node's API (addr: a node of a fleet once it
// is up, or a process a test started itself).
func (n *node) url(path string) string { return "http://" + n.addr + path }

// get returns the status and body of GET path; status 0 if no answer.
func (n *node) get(path string) (int, string) {
	resp, err := client.Get(n.url(path))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// do sends a request with an optional body and bearer token.
func (n *node) do(t *testing.T, method, path, token string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, n.url(path), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s on %s: %v", method, path, n.holder, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// getJSON GETs path and decodes the 200 answer into v.
func (n *node) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	code, body := n.get(path)
	if code != 200 {
		t.Fatalf("GET %s on %s: %d %s", path, n.holder, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s on %s: %v: %s", path, n.holder, err, body)
	}
}

// ready is a parsed /readyz answer.
type ready struct {
	code   int
	mode   string // leader, follower, stopping, unavailable; "" if no answer
	holder string
	leader string
	epoch  int64
	fields map[string]string
	body   string
}

func (r ready) String() string { return fmt.Sprintf("%d %s", r.code, strings.TrimSpace(r.body)) }

func (n *node) readyz() ready {
	code, body := n.get("/readyz")
	r := ready{code: code, body: body, fields: map[string]string{}}
	if code == 0 {
		return r
	}
	for _, kv := range strings.Fields(body) {
		k, v, _ := strings.Cut(kv, "=")
		r.fields[k] = v
	}
	r.mode, r.holder, r.leader = r.fields["mode"], r.fields["holder_id"], r.fields["leader"]
	r.epoch, _ = strconv.ParseInt(r.fields["lease_epoch"], 10, 64)
	return r
}

// agreed checks that every node in nodes answers /readyz with 200, exactly
// one as leader, every other as follower naming that leader and epoch. It
// returns the leader and its epoch, or a description of the disagreement.
func agreed(nodes []*node) (*node, int64, string) {
	var leader *node
	var epoch int64
	rs := make([]ready, len(nodes))
	var desc []string
	for i, n := range nodes {
		rs[i] = n.readyz()
		desc = append(desc, n.holder+": "+rs[i].String())
		if rs[i].code == 200 && rs[i].mode == "leader" {
			if leader != nil {
				return nil, 0, "two leaders: " + strings.Join(desc, "; ")
			}
			leader, epoch = n, rs[i].epoch
		}
	}
	if leader == nil {
		return nil, 0, "no leader: " + strings.Join(desc, "; ")
	}
	for i, n := range nodes {
		r := rs[i]
		if n == leader {
			if r.holder != n.holder || r.leader != n.holder || epoch < 1 || r.fields["lease_expires_at"] == "" {
				return nil, 0, "leader's readyz: " + r.String()
			}
			continue
		}
		if r.code != 200 || r.mode != "follower" || r.leader != leader.holder || r.epoch != epoch || r.holder != n.holder {
			return nil, 0, "not following " + leader.holder + ": " + strings.Join(desc, "; ")
		}
	}
	return leader, epoch, ""
}

// waitAgreed waits until nodes agree on one leader.
func waitAgreed(t *testing.T, nodes []*node, timeout time.Duration) (*node, int64) {
	t.Helper()
	var leader *node
	var epoch int64
	err := poll(timeout, func() (bool, string) {
		var why string
		leader, epoch, why = agreed(nodes)
		return leader != nil, why
	})
	if err != nil {
		t.Fatalf("nodes do not agree on one leader: %v", err)
	}
	return leader, epoch
}

// --- helpers ---

// poll calls cond every 10 ms until it returns true or timeout passes; the
// error then carries cond's last description.
func poll(timeout time.Duration, cond func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %s", timeout, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string { return testserver.FreeAddr(t) }

// holderOf returns the node of nodes whose holder id is holder (nil when
// none is) and another one of them.
func holderOf(nodes []*node, holder string) (held, other *node) {
	for _, n := range nodes {
		if n.holder == holder {
			held = n
		} else {
			other = n
		}
	}
	return held, other
}

// counterScript writes fleettest.CounterScript to a file of its own and
// returns its path and the path of the file it records its PIDs in.
func counterScript(t *testing.T) (script, pids string) {
	t.Helper()
	dir := t.TempDir()
	script, pids = filepath.Join(dir, "counter.sh"), filepath.Join(dir, "pids")
	if err := os.WriteFile(script, []byte(fleettest.CounterScript), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, pids
}

func without(nodes []*node, n *node) []*node {
	return slices.DeleteFunc(slices.Clone(nodes), func(m *node) bool { return m == n })
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func round(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond).String()
	}
	return out
}
