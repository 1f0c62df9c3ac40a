package hacluster_test

import (
	"os"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/hacluster"
)

// skip skips the test, saying why, when SQLEASE_TEST_HA=0 or the programs
// are missing.
func skip(t *testing.T) {
	if os.Getenv("SQLEASE_TEST_HA") == "0" {
		t.Skip("SQLEASE_TEST_HA=0: the Patroni cluster tests are switched off")
	}
	if why := hacluster.Available(); why != "" {
		t.Skipf("no Patroni cluster here: %s (scripts/test.sh installs the packages as root; SQLEASE_TEST_HA=0 skips)", why)
	}
}

// The harness itself: a failover promotes the replica, the old primary
// rejoins, and synchronous mode switches on and off.
func TestCluster(t *testing.T) {
	skip(t)
	c := hacluster.Start(t, hacluster.Config{})
	old, _, err := c.Primary()
	if err != nil || old == nil {
		t.Fatalf("primary: %v %v", old, err)
	}
	if err := c.SetSynchronous(true, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.SetSynchronous(false, time.Minute); err != nil {
		t.Fatal(err)
	}
	next, t0 := c.KillPrimary(t, old)
	t.Logf("%s promoted %v after %s was killed", next.Name, time.Since(t0).Round(time.Millisecond), old.Name)
	t1 := time.Now()
	if err := old.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(2 * time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, c.Logs(30))
	}
	st, _ := c.Status()
	t.Logf("%s rejoined in %v: %+v", old.Name, time.Since(t1).Round(time.Millisecond), st)
}
