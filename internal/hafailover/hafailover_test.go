package hafailover

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/internal/hacluster"
	"github.com/sqlease/sqlease/internal/ledger"
	"github.com/sqlease/sqlease/internal/tick"
	"github.com/sqlease/sqlease/postgres"
)

// bin is the sqlease command TestMain built ("" when the tests skip).
var bin string

func TestMain(m *testing.M) {
	os.Exit(fleettest.Main(m, "hafailover", skipReason() == "", false, &bin))
}

// skipReason says why the tests cannot run here ("" if they can).
func skipReason() string {
	if os.Getenv("SQLEASE_TEST_HA") == "0" {
		return "SQLEASE_TEST_HA=0: the Patroni failover tests are switched off"
	}
	if why := hacluster.Available(); why != "" {
		return "no Patroni cluster here: " + why + " (scripts/test.sh installs the packages as root; SQLEASE_TEST_HA=0 skips)"
	}
	return ""
}

func skip(t *testing.T) {
	if why := skipReason(); why != "" {
		t.Skip(why)
	}
}

// The nodes' timings: short, so that a failover and its hold-off take
// seconds.
var nodeFlags = []string{
	"--lease-duration", "2s",
	"--renew-interval", "500ms",
	"--acquire-interval", "200ms",
	"--schedule-refresh-interval", "200ms",
	"--shutdown-timeout", "5s",
}

const (
	// actBound bounds the time from the promotion to the fleet's next
	// action: the hold-off (one lease duration, 2 s), an acquire (every
	// 200 ms), a schedule refresh (200 ms) and a margin for a loaded
	// two-core machine and for the nodes' reconnection.
	actBound = 8 * time.Second
	// actWait is how long the test waits for that action at all.
	actWait = 2 * time.Minute
)

// TestHAFailover runs the failover scenario on one Patroni cluster, first
// in synchronous mode, then in asynchronous mode with the replication link
// cut before the kill.
func TestHAFailover(t *testing.T) {
	skip(t)
	c := hacluster.Start(t, hacluster.Config{})
	t.Run("synchronous", func(t *testing.T) { scenario(t, c, true, "ha_sync") })
	t.Run("asynchronous", func(t *testing.T) { scenario(t, c, false, "ha_async") })
}

// heal restarts the killed members, restores replication and waits until
// the cluster is healthy again.
func heal(t *testing.T, c *hacluster.Cluster) {
	t.Helper()
	for _, m := range c.Members() {
		m.RestoreReplication(t)
		if m.Killed() {
			if err := m.Restart(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.WaitHealthy(2 * time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, c.Logs(30))
	}
}

// observation is one sighting of an epoch with its holder.
type observation struct {
	epoch  int64
	holder string
	at     time.Time // the test's clock
	source string    // acquired (log), readyz, delivery
}

// fleet is the daemons of one scenario with what the test saw of them.
type fleet struct {
	t  *testing.T
	d  *fleettest.Daemons
	rc *fleettest.Receiver

	mu       sync.Mutex
	ready    []*fleettest.Node // started, Addr known, not told to stop
	seq      int
	paused   bool
	readyz   []observation
	accepted map[string]time.Time // job name → when the API answered 2xx
	churned  int
	errs     []string // from background goroutines, reported at the end
}

func (f *fleet) errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

func (f *fleet) nodes() []*fleettest.Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ready)
}

func (f *fleet) setPaused(p bool) {
	f.mu.Lock()
	f.paused = p
	f.mu.Unlock()
}

// launch starts a fresh node (a new holder id) and adds it once it serves.
// Safe from any goroutine.
func (f *fleet) launch() {
	f.mu.Lock()
	f.seq++
	holder := fmt.Sprintf("n%d", f.seq)
	f.mu.Unlock()
	n := f.d.Launch(holder)
	l, ok := n.TryWaitLogFrom(0, 30*time.Second, func(l fleettest.LogLine) bool { return l.Msg == "node_started" })
	if !ok {
		f.errorf("%s did not start within 30s", holder)
		return
	}
	n.Addr = l.Str("http")
	f.mu.Lock()
	f.ready = append(f.ready, n)
	f.mu.Unlock()
}

// readReplication is what a node's pool on dsn reads of the replication
// (postgres.ReadReplication); as says who reads it, for a failure.
func readReplication(t *testing.T, ctx context.Context, dsn, as string) sqlease.Durability {
	t.Helper()
	db, err := postgres.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	dur, err := postgres.ReadReplication(ctx, db)
	if err != nil {
		t.Fatalf("ReadReplication%s: %v", as, err)
	}
	return dur
}

// churn sends SIGTERM to the leader every period (unless paused) and
// replaces it with a fresh node.
func (f *fleet) churn(ctx context.Context, period time.Duration) {
	tick.Every(ctx, period, func() {
		f.mu.Lock()
		paused := f.paused
		f.mu.Unlock()
		if paused {
			return
		}
		var leader *fleettest.Node
		for _, n := range f.nodes() {
			if r := n.Readyz(); r.Code == 200 && r.Mode == "leader" {
				leader = n
				break
			}
		}
		if leader == nil {
			return
		}
		f.mu.Lock()
		f.ready = slices.DeleteFunc(f.ready, func(n *fleettest.Node) bool { return n == leader })
		f.churned++
		f.mu.Unlock()
		leader.Term()
		if !leader.WaitExit(15 * time.Second) {
			f.errorf("%s did not exit within 15s of SIGTERM", leader.Holder)
		}
		f.launch()
	})
}

// submit creates one-off jobs on random nodes every period and remembers
// those accepted.
func (f *fleet) submit(ctx context.Context, period time.Duration) {
	i := 0
	tick.Every(ctx, period, func() {
		i++
		nodes := f.nodes()
		if len(nodes) == 0 {
			return
		}
		n := nodes[rand.IntN(len(nodes))]
		name := fmt.Sprintf("once-%d", i)
		code, _, err := n.Do("POST", "/v1/jobs", map[string]any{
			"name":     name,
			"schedule": map[string]any{},
			"action":   map[string]any{"http": map[string]any{"url": f.rc.URL + "/once", "timeout": "10s"}},
			"retry":    map[string]any{"max_attempts": 20, "backoff": "200ms"},
		})
		if err == nil && code/100 == 2 {
			f.mu.Lock()
			f.accepted[name] = time.Now()
			f.mu.Unlock()
		}
	})
}

// watch samples every node's /readyz.
func (f *fleet) watch(ctx context.Context) {
	for ctx.Err() == nil {
		for _, n := range f.nodes() {
			r := n.Readyz()
			if r.Code == 200 && r.Epoch > 0 && r.Leader != "" {
				f.mu.Lock()
				f.readyz = append(f.readyz, observation{r.Epoch, r.Leader, time.Now(), "readyz " + n.Holder})
				f.mu.Unlock()
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (f *fleet) acceptedJobs() map[string]time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps(f.accepted)
}

func maps(m map[string]time.Time) map[string]time.Time {
	out := make(map[string]time.Time, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// acquisition is one leader_acquired log line.
type acquisition struct {
	observation
	expires string // expires_at, database time (RFC 3339)
}

func (f *fleet) acquisitions() []acquisition {
	var out []acquisition
	for _, n := range f.d.Nodes() {
		for _, l := range n.Log() {
			if l.Msg == "leader_acquired" {
				out = append(out, acquisition{observation{l.Int("lease_epoch"), l.Str("holder_id"), l.Recv, "acquired " + n.Holder}, l.Str("expires_at")})
			}
		}
	}
	return out
}

// scenario: three nodes churning and jobs flowing; in asynchronous mode the
// replication link is cut; the primary's host is killed; Patroni promotes
// the replica; the fleet goes on; then the checks.
func scenario(t *testing.T, c *hacluster.Cluster, synchronous bool, dbname string) {
	ctx := context.Background()
	heal(t, c)
	if err := c.SetSynchronous(synchronous, time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, c.Logs(20))
	}
	if err := c.CreateDatabase(dbname); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(`DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sqlease_plain') THEN CREATE ROLE sqlease_plain LOGIN; END IF; END $$`); err != nil {
		t.Fatal(err)
	}
	dsn := c.DSN(dbname)
	primary, _, err := c.Primary()
	if err != nil || primary == nil {
		t.Fatalf("no primary: %v", err)
	}

	rc := fleettest.NewReceiver(t)
	f := &fleet{t: t, rc: rc, accepted: map[string]time.Time{}}
	f.d = fleettest.NewDaemons(t, bin, dsn, nodeFlags...)
	for range 3 {
		f.launch()
	}
	bg, stopBG := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, fn := range []func(context.Context){
		func(ctx context.Context) { f.churn(ctx, 1500*time.Millisecond) },
		func(ctx context.Context) { f.submit(ctx, 100*time.Millisecond) },
		f.watch,
	} {
		wg.Add(1)
		go func() { defer wg.Done(); fn(bg) }()
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopBG()
			wg.Wait()
		}
	}
	defer stop()

	time.Sleep(5 * time.Second)

	// What a node's pool reads of the replication before the failover.
	dur := readReplication(t, ctx, dsn, "")
	t.Logf("before the failover: %s (%s)", dur, dur.Detail)
	want := sqlease.DurabilityAsynchronous
	if synchronous {
		want = sqlease.DurabilitySynchronous
	}
	if dur.Mode != want || dur.Sync+dur.Async != 1 {
		t.Errorf("DURABILITY: %s (%s) before the failover; want %s with one standby", dur, dur.Detail, want)
	}
	// A role without pg_read_all_stats sees the walsenders but not their
	// sync_state: the same verdict.
	pdur := readReplication(t, ctx, strings.Replace(dsn, "postgres://postgres@", "postgres://sqlease_plain@", 1), " as an unprivileged role")
	t.Logf("as an unprivileged role: %s (%s)", pdur, pdur.Detail)
	if pdur.Mode != want {
		t.Errorf("DURABILITY: %s (%s) as an unprivileged role; want %s", pdur, pdur.Detail, want)
	}
	for _, n := range f.nodes() {
		if r := n.Readyz(); strings.Contains(r.Body, "durability=") && !strings.Contains(r.Body, "durability="+string(want)) {
			t.Errorf("DURABILITY: %s's /readyz says %q; want durability=%s", n.Holder, r.Body, want)
		}
	}

	if !synchronous {
		primary.CutReplication()
		t.Logf("replication from %s cut", primary.Name)
		time.Sleep(3 * time.Second) // epochs and jobs the replica will not have
	}

	f.setPaused(true)
	next, killAt := c.KillPrimary(t, primary)
	promoted := time.Now()
	tl, _ := next.Timeline()
	t.Logf("%s promoted %v after the kill (timeline %d)", next.Name, promoted.Sub(killAt).Round(time.Millisecond), tl)
	f.setPaused(false)
	// After the promotion the new timeline holds acquires off for one lease
	// duration (2 s) from its first sighting; then the next acquire, a
	// schedule load and a submitted job's run. Waited for longer, so that
	// the checks below run even when the bound is missed.
	acted, ok := rc.WaitFor(actWait, func(dl fleettest.Delivery) bool { return dl.Start.After(promoted) })
	switch {
	case !ok:
		t.Errorf("NOT ACTING: no node sent an action within %v of the promotion; readyz: %v", actWait, readyzAll(f))
	case acted.Start.Sub(promoted) > actBound:
		t.Errorf("SLOW FAILOVER: the first action came %v after the promotion, bound %v (lease 2s hold-off + acquire + load + margin); readyz: %v",
			acted.Start.Sub(promoted).Round(time.Millisecond), actBound, readyzAll(f))
	}
	if ok {
		t.Logf("first action after the failover %v after the kill (%v after the promotion): %s",
			acted.Start.Sub(killAt).Round(time.Millisecond), acted.Start.Sub(promoted).Round(time.Millisecond), acted)
	}
	time.Sleep(3 * time.Second)
	stop()

	// Every accepted job runs (synchronous mode); asynchronous mode may lose
	// some, which is logged.
	accepted := f.acceptedJobs()
	wait := 20 * time.Second
	if !synchronous {
		wait = 5 * time.Second // some are lost for good
	}
	lost := rc.Unran(accepted, wait, true)
	var missing []string // accepted jobs the API no longer knows
	if nodes := f.nodes(); len(nodes) > 0 {
		for name := range accepted {
			if code, _, err := nodes[0].Do("GET", "/v1/jobs/"+name, nil); err == nil && code == 404 {
				missing = append(missing, name)
			}
		}
	}
	sort.Strings(missing)
	describe := func(names []string) string {
		var out []string
		for _, n := range names {
			out = append(out, fmt.Sprintf("%s (accepted %+v after the kill)", n, accepted[n].Sub(killAt).Round(time.Millisecond)))
		}
		return strings.Join(out, ", ")
	}
	dupes := duplicates(rc.Deliveries())
	if synchronous {
		if len(lost) > 0 {
			t.Errorf("LOST JOBS: %d of %d accepted jobs never ran: %s", len(lost), len(accepted), describe(lost))
		}
		if len(missing) > 0 {
			t.Errorf("LOST JOBS: %d of %d accepted jobs no longer exist: %s", len(missing), len(accepted), describe(missing))
		}
		for _, d := range dupes {
			t.Errorf("DELIVERED TWICE under one attempt: %s", d)
		}
	} else {
		t.Logf("asynchronous replication: %d of %d accepted jobs lost (never ran), %d gone from the database, %d occurrence attempts delivered twice",
			len(lost), len(accepted), len(missing), len(dupes))
	}

	f.d.Shutdown(15*time.Second, f.d.Running()...)
	for _, e := range f.errs {
		t.Errorf("%s", e)
	}
	checkEpochs(t, f, killAt)
	t.Logf("%d leadership changes by SIGTERM, %d acquisitions, %d jobs accepted, %d deliveries",
		f.churned, len(f.acquisitions()), len(accepted), len(rc.Deliveries()))
}

// checkEpochs: no epoch acquired twice; no two holders seen under one
// epoch (log, /readyz, deliveries); epochs strictly increasing in database
// time; every acquisition after the kill above every epoch seen before it;
// the deliveries pass the ledger's invariants.
func checkEpochs(t *testing.T, f *fleet, killAt time.Time) {
	t.Helper()
	acq := f.acquisitions()
	byEpoch := map[int64][]acquisition{}
	for _, a := range acq {
		byEpoch[a.epoch] = append(byEpoch[a.epoch], a)
	}
	for e, as := range byEpoch {
		if len(as) > 1 {
			t.Errorf("EPOCH TWICE: epoch %d acquired %d times: %v", e, len(as), as)
		}
	}
	var all []observation
	for _, a := range acq {
		all = append(all, a.observation)
	}
	f.mu.Lock()
	all = append(all, f.readyz...)
	f.mu.Unlock()
	for _, dl := range f.rc.Deliveries() {
		all = append(all, observation{dl.Epoch, dl.Holder, dl.Start, "delivery " + dl.Key})
	}
	holders := map[int64]map[string]observation{}
	for _, o := range all {
		if holders[o.epoch] == nil {
			holders[o.epoch] = map[string]observation{}
		}
		if _, ok := holders[o.epoch][o.holder]; !ok {
			holders[o.epoch][o.holder] = o
		}
	}
	for e, hs := range holders {
		if len(hs) > 1 {
			t.Errorf("TWO HOLDERS under epoch %d: %v", e, hs)
		}
	}
	// Database time orders the acquisitions (expires_at = acquired + lease).
	sorted := slices.Clone(acq)
	slices.SortStableFunc(sorted, func(a, b acquisition) int { return strings.Compare(normTime(a.expires), normTime(b.expires)) })
	for i := 1; i < len(sorted); i++ {
		if sorted[i].epoch <= sorted[i-1].epoch {
			t.Errorf("EPOCH NOT INCREASING: %d (%s, expires %s) after %d (%s, expires %s)",
				sorted[i].epoch, sorted[i].holder, sorted[i].expires, sorted[i-1].epoch, sorted[i-1].holder, sorted[i-1].expires)
		}
	}
	var maxBefore int64
	for _, o := range all {
		if o.at.Before(killAt) && o.epoch > maxBefore {
			maxBefore = o.epoch
		}
	}
	after := 0
	for _, a := range acq {
		if a.at.After(killAt) {
			after++
			if a.epoch <= maxBefore {
				t.Errorf("EPOCH BACKWARDS: %s acquired epoch %d after the kill; epoch %d was seen before it", a.holder, a.epoch, maxBefore)
			}
		}
	}
	if after == 0 {
		t.Errorf("no acquisition after the kill")
	}
	vs := ledger.Verify(f.rc.Ledger(), nil)
	for i, v := range vs {
		if i == 5 {
			t.Errorf("LEDGER: … %d more violations", len(vs)-i)
			break
		}
		t.Errorf("LEDGER: %s (deliveries as actions; kill at %s)", v, killAt.Format("15:04:05.000"))
	}
	t.Logf("epochs: highest before the kill %d; acquired after it: %v", maxBefore, epochsAfter(acq, killAt))
}

func epochsAfter(acq []acquisition, at time.Time) []int64 {
	var out []int64
	for _, a := range acq {
		if a.at.After(at) {
			out = append(out, a.epoch)
		}
	}
	slices.Sort(out)
	return out
}

// normTime makes RFC 3339 times of one zone sort as text.
func normTime(s string) string {
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return tm.UTC().Format("2006-01-02T15:04:05.000000000")
}

// duplicates lists the occurrence attempts delivered more than once.
func duplicates(ds []fleettest.Delivery) []string {
	seen := map[string][]fleettest.Delivery{}
	for _, d := range ds {
		k := fmt.Sprintf("%s#%d", d.Key, d.Attempt)
		seen[k] = append(seen[k], d)
	}
	var out []string
	for k, v := range seen {
		if len(v) > 1 {
			out = append(out, fmt.Sprintf("%s: %v", k, v))
		}
	}
	sort.Strings(out)
	return out
}

func readyzAll(f *fleet) string {
	var out []string
	for _, n := range f.nodes() {
		out = append(out, n.Holder+": "+n.Readyz().Body)
	}
	return strings.Join(out, "; ")
}
