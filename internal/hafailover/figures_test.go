package hafailover

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/internal/hacluster"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/sqlstore"
)

// TestHAFigures measures, on one Patroni cluster (SQLEASE_HA_FIGURES=1;
// SQLEASE_HA_FAILOVERS failovers per mode, default 3):
//
//   - what synchronous replication costs a lease renew and a job claim:
//     their latency with synchronous_mode on, off (an asynchronous standby)
//     and with no standby at all (the replica killed), same cluster, same
//     run;
//   - the time from the primary's death (kill -9 of its Patroni and
//     PostgreSQL) to a sqlease node acting again (the next action the
//     receiver gets), in synchronous and asynchronous mode: Patroni's ttl
//     (10 s here) until the promotion, then a lease duration's hold-off on
//     the new timeline (2 s).
func TestHAFigures(t *testing.T) {
	if os.Getenv("SQLEASE_HA_FIGURES") != "1" {
		t.Skip("SQLEASE_HA_FIGURES is not 1: the Patroni figures are measured only on request")
	}
	skip(t)
	failovers := fleettest.EnvInt(t, "SQLEASE_HA_FAILOVERS", 3)
	c := hacluster.Start(t, hacluster.Config{})
	if err := c.CreateDatabase("figures"); err != nil {
		t.Fatal(err)
	}
	latencies(t, c, c.DSN("figures"))
	for _, sync := range []bool{true, false} {
		failoverFigures(t, c, sync, failovers)
	}
}

// latencies measures renews and claims in three settings.
func latencies(t *testing.T, c *hacluster.Cluster, dsn string) {
	ctx := context.Background()
	const n = 300
	type result struct{ renew, claim time.Duration }
	results := map[string]result{}
	for _, mode := range []string{"synchronous", "asynchronous", "no standby"} {
		heal(t, c)
		if err := c.SetSynchronous(mode == "synchronous", time.Minute); err != nil {
			t.Fatal(err)
		}
		if mode == "no standby" {
			for _, m := range c.Members() {
				if p, _, _ := c.Primary(); p != m {
					if err := m.Kill(); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		prefix := fmt.Sprintf("fig%d_", len(results))
		st, err := postgres.OpenStore(ctx, dsn, prefix)
		if err != nil {
			t.Fatal(err)
		}
		dur, err := postgres.ReadReplication(ctx, st.DB())
		if err != nil {
			t.Fatal(err)
		}
		renew := measureRenews(t, st, n)
		claim := measureClaims(t, st, n)
		st.DB().Close()
		results[mode] = result{renew, claim}
		t.Logf("FIGURE %-12s (%s): renew median %v, claim median %v (%d each)", mode, dur, renew, claim, n)
	}
	base := results["no standby"]
	for _, mode := range []string{"synchronous", "asynchronous"} {
		r := results[mode]
		t.Logf("FIGURE %s against no standby: renew %.2f×, claim %.2f×", mode,
			float64(r.renew)/float64(base.renew), float64(r.claim)/float64(base.claim))
	}
	heal(t, c)
}

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func measureRenews(t *testing.T, st *sqlstore.Store, n int) time.Duration {
	ctx := context.Background()
	l, err := st.Acquire(ctx, "figures", "h", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tok := l.Token()
	var ds []time.Duration
	for range n {
		t0 := time.Now()
		if _, err := st.Renew(ctx, tok, time.Minute); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	return median(ds)
}

func measureClaims(t *testing.T, st *sqlstore.Store, n int) time.Duration {
	ctx := context.Background()
	now, err := st.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	jobs := make([]sqlstore.StoredJob, n)
	next := make([]time.Time, n)
	for i := range jobs {
		name := fmt.Sprintf("due-%d", i)
		jobs[i] = sqlstore.StoredJob{Job: sqlease.Job{Name: name, MissedRuns: sqlease.RunOnce,
			Retry: sqlease.Retry{MaxAttempts: 3}, LockTimeout: time.Hour}, SpecHash: name}
		next[i] = now.Add(-time.Second)
	}
	if _, _, err := st.InsertJobs(ctx, jobs, next); err != nil {
		t.Fatal(err)
	}
	var ds []time.Duration
	for range n {
		t0 := time.Now()
		c, err := st.ClaimDue(ctx, "w", 1)
		if err != nil || len(c) != 1 {
			t.Fatalf("claim: %d claimed, %v", len(c), err)
		}
		ds = append(ds, time.Since(t0))
	}
	return median(ds)
}

// failoverFigures kills the primary times times under one fleet of three
// nodes and one-off jobs submitted every 100 ms, and logs the time from
// each kill to the next action received.
func failoverFigures(t *testing.T, c *hacluster.Cluster, synchronous bool, times int) {
	mode := map[bool]string{true: "synchronous", false: "asynchronous"}[synchronous]
	db := "fig_" + mode[:5]
	heal(t, c)
	if err := c.SetSynchronous(synchronous, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateDatabase(db); err != nil {
		t.Fatal(err)
	}
	rc := fleettest.NewReceiver(t)
	f := &fleet{t: t, rc: rc, accepted: map[string]time.Time{}}
	f.d = fleettest.NewDaemons(t, bin, c.DSN(db), nodeFlags...)
	for range 3 {
		f.launch()
	}
	bg, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); f.submit(bg, 100*time.Millisecond) }()
	defer func() { stop(); wg.Wait() }()

	var toAct, toPromote []time.Duration
	for i := range times {
		if i > 0 {
			heal(t, c)
			if err := c.SetSynchronous(synchronous, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		from := time.Now()
		// A fresh database on a timeline after the first holds its first
		// acquire off too: wait long enough for any hold-off.
		if _, ok := rc.WaitFor(2*time.Minute, func(dl fleettest.Delivery) bool { return dl.Start.After(from) }); !ok {
			t.Fatalf("%s: the fleet does not act before failover %d; readyz: %s", mode, i+1, readyzAll(f))
		}
		primary, _, err := c.Primary()
		if err != nil || primary == nil {
			t.Fatalf("no primary: %v", err)
		}
		var before int64 // the newest epoch that acted before the kill
		for _, dl := range rc.Deliveries() {
			before = max(before, dl.Epoch)
		}
		next, killAt := c.KillPrimary(t, primary)
		promoted := time.Since(killAt)
		// An old term may still send until its local deadline: acting
		// again is the first action of a newer epoch.
		dl, ok := rc.WaitFor(60*time.Second, func(dl fleettest.Delivery) bool { return dl.Start.After(killAt) && dl.Epoch > before })
		if !ok {
			t.Fatalf("%s: no action within 60s of the kill; readyz: %s", mode, readyzAll(f))
		}
		toPromote = append(toPromote, promoted)
		toAct = append(toAct, dl.Start.Sub(killAt))
		t.Logf("%s failover %d: %s promoted %v after the kill; next action %v after it (%s)", mode, i+1, next.Name,
			promoted.Round(time.Millisecond), dl.Start.Sub(killAt).Round(time.Millisecond), dl)
	}
	t.Logf("FIGURE %s failover, primary killed → next action: median %v of %v (promotion alone: median %v of %v)",
		mode, median(slices.Clone(toAct)).Round(time.Millisecond), round(toAct), median(slices.Clone(toPromote)).Round(time.Millisecond), round(toPromote))
}

func round(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Millisecond)
	}
	return out
}
