package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/sqlite"
)

// singletonStart absorbs, on top of a lease failover, the new holder
// starting the singleton's process and its first save.
const singletonStart = time.Second

// singletonTrial runs a counter singleton (fleettest.CounterScript: it
// resumes from its saved state, counts, saves every count under its epoch
// through its node and logs each save the node accepted) on three nodes,
// and hits the node running it with f. It checks that
//
//   - another node runs it within the failover bound (a killed, frozen or
//     cut-off holder), or it runs again after the database came back;
//   - no save was accepted under an epoch after a save under a newer one,
//     and the count never went back (no state lost, no stale copy saving);
//   - two copies never ran at once: a frozen node's process is killed by
//     the node's guard at its acting deadline, before another node may
//     start one;
//   - in the end exactly one copy runs.
func singletonTrial(t *testing.T, b backend, mode string, f fault) {
	url, admin := b.fresh(t)
	b.admin = admin
	dir := t.TempDir()
	script, pids, saves := filepath.Join(dir, "counter.sh"), filepath.Join(dir, "pids"), filepath.Join(dir, "saves")
	if err := os.WriteFile(script, []byte(fleettest.CounterScript), 0o755); err != nil {
		t.Fatal(err)
	}
	d, nodes, proxies := startFleet(t, url, f, "--election", mode)
	// Created through one node. Without a change feed (all but
	// PostgreSQL) the others learn of it at their next re-read of the
	// table, within half a lease, and may place it from then on: before
	// the fault.
	code, body, err := nodes[0].Do("POST", "/v1/singletons", map[string]any{
		"name": "counter", "command": []string{"bash", script}, "env": map[string]string{"PIDS": pids, "SAVES": saves},
		"initial_state": map[string]int{"n": 0}, "heartbeat": "1s", "stop_timeout": "1s"})
	if err != nil || code != http.StatusCreated {
		t.Fatalf("creating the singleton through %s: %d %s %v", nodes[0].Holder, code, body, err)
	}
	// Each node has it registered before the fault: a node holds its
	// member lease (placement by node) only while it has singletons.
	for _, n := range nodes {
		n.WaitLog(leaseDuration+2*time.Second, "the node's member lease", func(l fleettest.LogLine) bool {
			return l.Str("member") == n.Holder && l.Msg == "leader_acquired"
		})
	}
	last := func() (fleettest.Save, bool) {
		s := fleettest.Saves(saves)
		if len(s) == 0 {
			return fleettest.Save{}, false
		}
		return s[len(s)-1], true
	}
	waitSave := func(timeout time.Duration, pred func(fleettest.Save) bool) (fleettest.Save, time.Time, bool) {
		for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
			for _, s := range fleettest.Saves(saves) {
				if pred(s) {
					return s, time.Now(), true
				}
			}
			if time.Now().After(deadline) {
				return fleettest.Save{}, time.Time{}, false
			}
		}
	}
	if _, _, ok := waitSave(20*time.Second, func(s fleettest.Save) bool { return s.N >= 10 }); !ok {
		t.Fatalf("the singleton did not save 10 counts within 20s: saves %v, nodes: %s", fleettest.Saves(saves), leaders(nodes))
	}
	s0, _ := last()
	victim := d.Node(s0.Holder)
	if victim == nil {
		t.Fatalf("the singleton runs on %q, not a node of this fleet", s0.Holder)
	}

	// Two copies alive at once, sampled until the checks.
	var (
		mu      sync.Mutex
		twice   []string
		stopped = make(chan struct{})
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			select {
			case <-stopped:
				return
			case <-time.After(20 * time.Millisecond):
			}
			alive := fleettest.AlivePIDs(pids)
			mu.Lock()
			if len(alive) > 1 && len(twice) < 10 {
				twice = append(twice, fmt.Sprintf("%s: pids %v", time.Now().Format("15:04:05.000"), alive))
			}
			mu.Unlock()
		}
	}()
	defer func() { close(stopped); <-done }()

	var (
		bound     time.Duration
		failover  time.Duration
		newHolder string
	)
	other := func(s fleettest.Save) bool { return s.Epoch > s0.Epoch && s.Holder != victim.Holder }
	measure := func(from time.Time, timeout time.Duration) {
		if s, at, ok := waitSave(timeout, other); ok {
			failover, newHolder = at.Sub(from), fmt.Sprintf("%s@%d", s.Holder, s.Epoch)
		}
	}
	t0 := time.Now()
	switch f {
	case faultKill:
		victim.Kill()
		bound = leaseFailover + singletonStart
		if mode == "advisory" {
			bound = crashFailover + singletonStart
		}
		measure(t0, bound+5*time.Second)
	case faultStop:
		t0 = b.freeze(t, victim)
		bound = leaseFailover + singletonStart
		measure(t0, stopFor)
		if rest := stopFor - time.Since(t0); rest > 0 {
			time.Sleep(rest)
		}
		victim.Cont()
	case faultCut:
		proxies[victim.Holder].Down()
		bound = leaseFailover + singletonStart
		measure(t0, stopFor)
		if rest := stopFor - time.Since(t0); rest > 0 {
			time.Sleep(rest)
		}
		proxies[victim.Holder].Up(t)
	case faultRestart, faultTerminate:
		b.serverFault(t, f)
	default:
		t.Fatalf("fault %s: not a singleton fault", f)
	}
	faultEnd := time.Now()
	if bound > 0 {
		switch {
		case newHolder == "":
			t.Errorf("FAILOVER: no other node saved the singleton's state within %v of the %s of %s@%d (bound %v); saves since: %v",
				time.Since(t0).Round(time.Millisecond), f, victim.Holder, s0.Epoch, bound, savesAfter(saves, s0))
		case failover > bound:
			t.Errorf("FAILOVER: %s saved first %v after the %s of %s@%d; bound %v", newHolder, failover.Round(time.Millisecond), f, victim.Holder, s0.Epoch, bound)
		default:
			record(b.dialect, "singleton "+mode, f, failover)
			t.Logf("failover %v to %s (bound %v)", failover.Round(time.Millisecond), newHolder, bound)
		}
	}
	// It runs on: a save of a count past every one before the end of the
	// fault, within the bound a job submitted then has.
	sEnd, _ := last()
	if s, at, ok := waitSave(dispatchBound, func(s fleettest.Save) bool { return s.N > sEnd.N }); !ok {
		t.Errorf("NOT RUNNING: no save within %v of the end of the %s (last %+v); nodes: %s", dispatchBound, f, sEnd, leaders(d.Running()))
	} else {
		recordDispatch(b.dialect, "singleton "+mode, f, at.Sub(t0))
		t.Logf("save %+v %v after the fault began", s, at.Sub(t0).Round(time.Millisecond))
	}
	time.Sleep(2 * time.Second)

	// Exactly one copy in the end.
	var alive []int
	for deadline := time.Now().Add(dispatchBound); ; time.Sleep(50 * time.Millisecond) {
		if alive = fleettest.AlivePIDs(pids); len(alive) == 1 || time.Now().After(deadline) {
			break
		}
	}
	if len(alive) != 1 {
		t.Errorf("COPIES: %d copies of the singleton run %v after the %s, want 1 (pids %v)", len(alive), dispatchBound, f, alive)
	}
	code, body, err = d.Running()[0].Do("GET", "/v1/singletons/counter", nil)
	var v struct{ Status, Holder string }
	if err != nil || code != 200 || json.Unmarshal(body, &v) != nil || v.Status != "running" {
		t.Errorf("GET /v1/singletons/counter after the %s: %d %s %v, want it running", f, code, body, err)
	}
	mu.Lock()
	if len(twice) > 0 {
		t.Errorf("TWO COPIES at once (fault %s began %s): %s", f, t0.Format("15:04:05.000"), strings.Join(twice, "; "))
	}
	mu.Unlock()
	all := fleettest.Saves(saves)
	for i := 1; i < len(all); i++ {
		p, s := all[i-1], all[i]
		if s.Epoch < p.Epoch {
			t.Errorf("STALE SAVE: %+v accepted after %+v (fault %s began %s)", s, p, f, t0.Format("15:04:05.000"))
		}
		if s.N <= p.N {
			t.Errorf("STATE WENT BACK: %+v saved after %+v (fault %s began %s)", s, p, f, t0.Format("15:04:05.000"))
		}
	}
	t.Logf("%d saves, epochs %d → %d, fault ended %v after it began", len(all), s0.Epoch, all[len(all)-1].Epoch, faultEnd.Sub(t0).Round(time.Millisecond))
	d.Shutdown(15*time.Second, d.Running()...)
}

// savesAfter returns the saves logged after s.
func savesAfter(file string, s fleettest.Save) []fleettest.Save {
	all := fleettest.Saves(file)
	for i, x := range all {
		if x == s {
			return all[i+1:]
		}
	}
	return all
}

// The probe freeze relies on sees a write transaction of another
// connection, and leaves the database writable.
func TestSQLiteWriteLockedProbe(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "probe.db")
	db, other := opened(t, sqlite.Open, path), opened(t, sqlite.Open, path)
	if locked, err := fleettest.SQLiteWriteLocked(ctx, db); err != nil || locked {
		t.Fatalf("idle database: locked %v, %v", locked, err)
	}
	tx, err := other.BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock
	if err != nil {
		t.Fatal(err)
	}
	if locked, err := fleettest.SQLiteWriteLocked(ctx, db); err != nil || !locked {
		t.Fatalf("during another connection's write transaction: locked %v, %v", locked, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (x int)`); err != nil {
		t.Fatalf("writing after the probes: %v", err)
	}
}
