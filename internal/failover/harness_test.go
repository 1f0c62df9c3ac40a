package failover

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/internal/ledger"
)

// bin is the sqlease binary every node runs, built once in TestMain.
var bin string

func TestMain(m *testing.M) {
	if b := os.Getenv("SQLEASE_FAILOVER_BIN"); b != "" {
		bin = b
		os.Exit(m.Run())
	}
	// Under -short every test skips: nothing to build.
	os.Exit(fleettest.Main(m, "failover", wantsProcesses(), raceEnabled, &bin))
}

// wantsProcesses is false under -short, where the tests skip. flag.Parse has
// not run yet in TestMain's caller, so look at the arguments.
func wantsProcesses() bool {
	for _, a := range os.Args[1:] {
		if a == "-test.short" || a == "-test.short=true" {
			return false
		}
	}
	return true
}

// --- node processes ---

// logLine is one JSON log line of a node, with its local arrival time.
type logLine = fleettest.LogLine

// node is one `sqlease serve` process of the shared harness
// (internal/fleettest).
type node struct {
	*fleettest.Node
	id string
}

// routine log lines not kept in memory (the stderr file has them all).
var routine = map[string]bool{"run_started": true, "run_finished": true, "leader_renewed": true}

// waitLog returns the first log line matching pred, from the start of the
// node's log; it gives up early once the node has exited.
func (n *node) waitLog(timeout time.Duration, what string, pred func(logLine) bool) (logLine, error) {
	deadline := time.Now().Add(timeout)
	for {
		exited := n.Exited() // all its lines are read by then
		if l, ok := n.TryWaitLogFrom(0, min(time.Until(deadline), 50*time.Millisecond), pred); ok {
			return l, nil
		}
		switch {
		case exited:
			return logLine{}, fmt.Errorf("node %s exited (%v) before %s", n.id, n.ExitErr(), what)
		case time.Now().After(deadline):
			return logLine{}, fmt.Errorf("node %s: no %s within %v", n.id, what, timeout)
		}
	}
}

func (n *node) exited() bool { return n.Exited() }

func (n *node) signal(sig syscall.Signal) { n.Signal(sig) }

func (n *node) waitExit(timeout time.Duration) bool { return n.WaitExit(timeout) }

// --- clusters ---

// cluster is a fleet of nodes on one database, all with the same flags:
// internal/fleettest's Daemons (whose cleanup kills the nodes, fails the
// test on a data race or panic in a node's log and logs the nodes' stderr
// if the test failed), and the recorder their jobs call.
type cluster struct {
	t   testing.TB
	d   *fleettest.Daemons
	rec *fleettest.Receiver

	mu    sync.Mutex
	nodes []*node
	seq   int
}

func newCluster(t testing.TB, db, mode string, args ...string) *cluster {
	d := fleettest.NewDaemons(t, bin, db, append([]string{"--election", mode}, args...)...)
	d.Unkept = routine
	return &cluster{t: t, d: d, rec: fleettest.NewReceiver(t)}
}

func (c *cluster) all() []*node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

func (c *cluster) node(id string) *node {
	for _, n := range c.all() {
		if n.id == id {
			return n
		}
	}
	return nil
}

func (c *cluster) running() []*node { return fleettest.Unexited(c.all()) }

// launch starts one node and waits until it serves HTTP and has seen the
// lease (as follower or leader).
func (c *cluster) launch() *node {
	c.t.Helper()
	c.mu.Lock()
	c.seq++
	id := fmt.Sprintf("n%d", c.seq)
	c.mu.Unlock()
	n := &node{Node: c.d.Start(id)[0], id: id}
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	return n
}

// addJobs creates k every-100ms jobs calling the recorder, k phases spread
// over the interval, through n's HTTP API.
func (c *cluster) addJobs(n *node, k int) {
	c.t.Helper()
	const every = 100 * time.Millisecond
	for i := range k {
		body := fmt.Sprintf(`{"name":"tick-%d","schedule":{"every":"%s"},"missed_runs":"skip",`+
			`"action":{"http":{"url":%q,"timeout":"5s"}}}`, i, every, c.rec.URL+"/hit")
		start := time.Now()
		resp, err := http.Post("http://"+n.Addr+"/v1/jobs", "application/json", strings.NewReader(body))
		if err != nil {
			c.t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			c.t.Fatalf("creating job: %s: %s", resp.Status, b)
		}
		time.Sleep(every/time.Duration(k) - time.Since(start))
	}
}

// leaderNow waits for a fresh action and returns its holder's node and
// epoch: the node acting now.
func (c *cluster) leaderNow(timeout time.Duration) (*node, int64) {
	c.t.Helper()
	h, ok := c.rec.WaitFrom(c.rec.Mark(), timeout, func(fleettest.Delivery) bool { return true })
	if !ok {
		c.t.Fatalf("no action within %v", timeout)
	}
	n := c.node(h.Holder)
	if n == nil || n.exited() {
		c.t.Fatalf("action from %q, which is not a running node of this cluster", h.Holder)
	}
	return n, h.Epoch
}

// --- failover samples ---

// sample is one measured handoff. Durations are from the signal.
type sample struct {
	Total    time.Duration // first action of a higher epoch
	Acquired time.Duration // the new leader's leader_acquired log line
	Rebuilt  time.Duration // its schedule_rebuilt log line
	DueWait  time.Duration // of Total-Rebuilt: waiting for the next occurrence to fall due
	Released time.Duration // graceful only: the old leader's leader_released line
	Stopping time.Duration // graceful only: the old leader's node_stopping line
	From, To string
}

// handoff signals the acting leader and measures until another node acts,
// then starts a replacement node so the fleet size stays the same.
func (c *cluster) handoff(sig syscall.Signal, timeout time.Duration) sample {
	c.t.Helper()
	old, oldEpoch := c.leaderNow(10 * time.Second)
	from := c.rec.Mark()
	t0 := time.Now()
	old.signal(sig)
	h, ok := c.rec.WaitFrom(from, timeout, func(h fleettest.Delivery) bool { return h.Epoch > oldEpoch })
	if !ok {
		c.t.Fatalf("%s after %v: no action with an epoch above %d (%s's) within %v", sig, "signal", oldEpoch, old.id, timeout)
	}
	s := sample{Total: h.Start.Sub(t0), From: old.id, To: h.Holder}
	nw := c.node(h.Holder)
	if nw == nil {
		c.t.Fatalf("action from unknown holder %q", h.Holder)
	}
	acq, err := nw.waitLog(5*time.Second, "leader_acquired", func(l logLine) bool { return l.Msg == "leader_acquired" && l.Int("lease_epoch") == h.Epoch })
	if err != nil {
		c.t.Fatal(err)
	}
	reb, err := nw.waitLog(5*time.Second, "schedule_rebuilt", func(l logLine) bool { return l.Msg == "schedule_rebuilt" && l.Int("lease_epoch") == h.Epoch })
	if err != nil {
		c.t.Fatal(err)
	}
	s.Acquired, s.Rebuilt = acq.Time.Sub(t0), reb.Time.Sub(t0)
	sf, _ := time.Parse(time.RFC3339Nano, h.SF) // the occurrence (database time)
	if d := sf.Sub(reb.Time); d > 0 {
		s.DueWait = d
	}
	if !old.waitExit(30 * time.Second) {
		c.t.Fatalf("%s did not exit within 30s of %s", old.id, sig)
	}
	if sig == syscall.SIGTERM {
		if err := old.ExitErr(); err != nil {
			c.t.Errorf("%s exited with %v after SIGTERM, want status 0", old.id, err)
		}
		if l, err := old.waitLog(time.Second, "leader_released", func(l logLine) bool { return l.Msg == "leader_released" && l.Int("lease_epoch") == oldEpoch }); err == nil {
			s.Released = l.Time.Sub(t0)
		} else {
			c.t.Errorf("graceful stop of %s: %v", old.id, err)
		}
		if l, err := old.waitLog(time.Second, "node_stopping", func(l logLine) bool { return l.Msg == "node_stopping" }); err == nil {
			s.Stopping = l.Time.Sub(t0)
		}
	}
	c.launch()
	// Let the newcomer settle into following (queued on the lock, or
	// polling) and the new leader act a few times.
	time.Sleep(300 * time.Millisecond)
	return s
}

// electionHandoff is handoff for a fleet without jobs: it signals the node
// that acquired the highest epoch and measures until another node logs
// leader_acquired — the election alone, with no executor load on the
// machine. It returns that duration.
func (c *cluster) electionHandoff(sig syscall.Signal, timeout time.Duration) time.Duration {
	c.t.Helper()
	var old *node
	var oldEpoch int64
	for _, n := range c.running() {
		for _, l := range n.Log() {
			if l.Msg == "leader_acquired" && l.Int("lease_epoch") > oldEpoch {
				old, oldEpoch = n, l.Int("lease_epoch")
			}
		}
	}
	if old == nil {
		c.t.Fatal("no running node has acquired the lease")
	}
	t0 := time.Now()
	old.signal(sig)
	type res struct {
		l   logLine
		err error
	}
	ch := make(chan res, len(c.running()))
	var waiting int
	for _, n := range c.running() {
		if n == old {
			continue
		}
		waiting++
		go func() {
			l, err := n.waitLog(timeout, "leader_acquired", func(l logLine) bool { return l.Msg == "leader_acquired" && l.Int("lease_epoch") > oldEpoch })
			ch <- res{l, err}
		}()
	}
	var got *logLine
	for range waiting {
		r := <-ch
		if r.err == nil {
			got = &r.l
			break
		}
	}
	if got == nil {
		c.t.Fatalf("%s of %s: no other node acquired the lease within %v", sig, old.id, timeout)
	}
	if !old.waitExit(30 * time.Second) {
		c.t.Fatalf("%s did not exit within 30s of %s", old.id, sig)
	}
	c.launch()
	time.Sleep(300 * time.Millisecond)
	return got.Time.Sub(t0)
}

// checkSingleActor fails the test if the actions break the one checker's
// invariants (ledger.Verify over the receiver's deliveries): an action with
// a lower epoch arrived after one with a higher epoch (two leaders acting
// over each other), or two holders acted under one epoch.
func (c *cluster) checkSingleActor() {
	c.t.Helper()
	for i, v := range ledger.Verify(c.rec.Ledger(), nil) {
		if i == 5 {
			break
		}
		c.t.Errorf("actions: %s", v)
	}
}

// gaps returns the intervals between consecutive actions of one epoch: the
// schedule's granularity as the fleet delivers it.
func gaps(hits []fleettest.Delivery) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(hits); i++ {
		if hits[i].Epoch == hits[i-1].Epoch {
			out = append(out, hits[i].Start.Sub(hits[i-1].Start))
		}
	}
	return out
}

// --- statistics and tables ---

type spread struct {
	N                int
	Median, Min, Max time.Duration
}

func summarize(ds []time.Duration) spread {
	if len(ds) == 0 {
		return spread{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{N: len(s), Median: med, Min: s[0], Max: s[len(s)-1]}
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
}

func (s spread) String() string {
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%s (%s–%s)", ms(s.Median), ms(s.Min), ms(s.Max))
}

// table renders rows as an aligned text table.
func table(header []string, rows [][]string) string {
	w := make([]int, len(header))
	for _, r := range append([][]string{header}, rows...) {
		for i, c := range r {
			w[i] = max(w[i], len([]rune(c)))
		}
	}
	var b bytes.Buffer
	line := func(r []string) {
		for i, c := range r {
			pad := w[i] - len([]rune(c))
			if i > 0 {
				b.WriteString(" | ")
			}
			b.WriteString(c + strings.Repeat(" ", pad))
		}
		b.WriteString("\n")
	}
	line(header)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = strings.Repeat("-", w[i])
	}
	line(sep)
	for _, r := range rows {
		line(r)
	}
	return b.String()
}

func ctxT(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
