package failover

import (
	"syscall"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/internal/pgtest"
)

// frozenArgs are short timings, so that a frozen leader's lease expires in
// the test's time: lease 2s, renew 500ms, acquire 200ms.
var frozenArgs = []string{"--lease-duration", "2s", "--renew-interval", "500ms", "--acquire-interval", "200ms"}

// frozenHandoff SIGSTOPs c's acting leader (its session, and so its advisory
// lock, stays alive) and measures until another node acts: within lease +
// acquire interval (+ slack for this machine), not for as long as the
// leader is frozen. It then wakes the old leader, which must not act under
// its old epoch, and checks that the fleet acts on.
func frozenHandoff(t *testing.T, c *cluster) time.Duration {
	t.Helper()
	const lease, acquire = 2 * time.Second, 200 * time.Millisecond
	old, oldEpoch := c.leaderNow(15 * time.Second)
	from := c.rec.Mark()
	t0 := time.Now()
	old.signal(syscall.SIGSTOP)
	h, ok := c.rec.WaitFrom(from, 4*lease, func(h fleettest.Delivery) bool { return h.Epoch > oldEpoch })
	took := time.Since(t0)
	if !ok {
		old.signal(syscall.SIGCONT)
		t.Fatalf("SIGSTOP of leader %s (epoch %d): no action of a higher epoch within %s", old.id, oldEpoch, 4*lease)
	}
	took = h.Start.Sub(t0)
	if bound := lease + acquire + 2300*time.Millisecond; took > bound { // still well before the SIGCONT at 5 s
		t.Errorf("SIGSTOP of %s → %s acts after %s, want ≤ lease + acquire (+ slack) = %s", old.id, h.Holder, took, bound)
	}
	// Keep it frozen past 2.5 × lease, as a long GC pause or VM freeze.
	time.Sleep(max(5*lease/2-time.Since(t0), 0))
	woke := c.rec.Mark()
	old.signal(syscall.SIGCONT)
	// After waking, the fleet acts on, and nothing acts under the old epoch.
	if _, ok := c.rec.WaitFrom(woke, 10*time.Second, func(h fleettest.Delivery) bool { return h.Epoch > oldEpoch }); !ok {
		t.Fatalf("no action within 10s after %s woke", old.id)
	}
	time.Sleep(time.Second)
	for _, h := range c.rec.Deliveries()[woke:] {
		if h.Epoch <= oldEpoch {
			t.Errorf("after waking, %s acted under epoch %d (the frozen leader's was %d)", h.Holder, h.Epoch, oldEpoch)
		}
	}
	c.checkSingleActor()
	return took
}

// TestAdvisoryFrozenLeader: in advisory mode a frozen leader keeps its
// session lock; followers must still take over within lease + acquire
// interval through the lease row (SPEC G5), on PostgreSQL and MariaDB, in
// parallel (a fleet and a database each).
func TestAdvisoryFrozenLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and sqlease processes")
	}
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		c := actingCluster(t, pgtest.CreateDatabase(t, serverURL(t)), "advisory", frozenArgs...)
		t.Logf("advisory, PostgreSQL: SIGSTOP → next action after %s", frozenHandoff(t, c))
	})
	t.Run("mysql", func(t *testing.T) {
		db := dbtest.MySQLURL(t)
		t.Parallel()
		c := actingCluster(t, db, "advisory", frozenArgs...)
		t.Logf("advisory, MariaDB: SIGSTOP → next action after %s", frozenHandoff(t, c))
	})
}
