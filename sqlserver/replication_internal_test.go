package sqlserver

import (
	"strings"
	"testing"

	"github.com/sqlease/sqlease"
)

// No SQL Server here: the verdicts on the rows the queries would return,
// and the queries' text.
func TestReplicationVerdict(t *testing.T) {
	primary := replicaState{mode: "SYNCHRONOUS_COMMIT", state: "SYNCHRONIZED", local: true, primary: true}
	for _, c := range []struct {
		name   string
		d      sqlease.Durability
		mode   sqlease.DurabilityMode
		sync   int
		async  int
		detail string
	}{
		{"no availability group", agVerdict(nil), sqlease.DurabilitySingle, 0, 0, "no availability group"},
		{"sync secondary", agVerdict([]replicaState{primary, {mode: "SYNCHRONOUS_COMMIT", state: "SYNCHRONIZED"}}), sqlease.DurabilitySynchronous, 1, 0, "synchronized"},
		{"sync secondary catching up", agVerdict([]replicaState{primary, {mode: "SYNCHRONOUS_COMMIT", state: "SYNCHRONIZING"}}), sqlease.DurabilityAsynchronous, 0, 1, "synchronizing"},
		{"async secondary", agVerdict([]replicaState{primary, {mode: "ASYNCHRONOUS_COMMIT", state: "SYNCHRONIZING"}}), sqlease.DurabilityAsynchronous, 0, 1, "none synchronous"},
		{"mixed", agVerdict([]replicaState{primary, {mode: "SYNCHRONOUS_COMMIT", state: "SYNCHRONIZED"}, {mode: "ASYNCHRONOUS_COMMIT", state: "SYNCHRONIZING"}}), sqlease.DurabilitySynchronous, 1, 1, "1 synchronous"},
		{"configuration only", agVerdict([]replicaState{primary, {mode: "CONFIGURATION_ONLY"}}), sqlease.DurabilitySingle, 0, 0, "without a data-bearing"},
		{"on a secondary", agVerdict([]replicaState{{mode: "SYNCHRONOUS_COMMIT", state: "SYNCHRONIZED", local: true}}), sqlease.DurabilityUnknown, 0, 0, "secondary"},
		{"azure", azureVerdict(0), sqlease.DurabilitySynchronous, 0, 0, "within the region"},
		{"azure failover group", azureVerdict(1), sqlease.DurabilityAsynchronous, 0, 1, "geo-failover"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := c.d
			if d.Mode != c.mode || d.Sync != c.sync || d.Async != c.async || !strings.Contains(d.Detail, c.detail) {
				t.Errorf("%+v; want mode %s sync %d async %d, detail with %q", d, c.mode, c.sync, c.async, c.detail)
			}
		})
	}
	for _, want := range []string{"sys.dm_hadr_database_replica_states", "sys.availability_replicas", "availability_mode_desc",
		"synchronization_state_desc", "DB_ID()"} {
		if !strings.Contains(replicaStatesQuery, want) {
			t.Errorf("replicaStatesQuery lacks %s", want)
		}
	}
}
