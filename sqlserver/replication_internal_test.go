package sqlserver

import (
	"strings"
	"testing"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/storetest"
)

// No SQL Server here: the verdicts on the rows the queries would return,
// and the queries' text.
func TestReplicationVerdict(t *testing.T) {
	primary := replicaState{mode: "SYNCHRONOUS_COMMIT", state: "SYNCHRONIZED", local: true, primary: true}
	storetest.Verdicts(t, []storetest.Verdict{
		{Name: "no availability group", Got: agVerdict(nil), Mode: sqlease.DurabilitySingle, Sync: 0, Async: 0, Detail: "no availability group"},
		{Name: "sync secondary", Got: agVerdict([]replicaState{primary, {mode: "SYNCHRONOUS_COMMIT", state: "SYNCHRONIZED"}}), Mode: sqlease.DurabilitySynchronous, Sync: 1, Async: 0, Detail: "synchronized"},
		{Name: "sync secondary catching up", Got: agVerdict([]replicaState{primary, {mode: "SYNCHRONOUS_COMMIT", state: "SYNCHRONIZING"}}), Mode: sqlease.DurabilityAsynchronous, Sync: 0, Async: 1, Detail: "synchronizing"},
		{Name: "async secondary", Got: agVerdict([]replicaState{primary, {mode: "ASYNCHRONOUS_COMMIT", state: "SYNCHRONIZING"}}), Mode: sqlease.DurabilityAsynchronous, Sync: 0, Async: 1, Detail: "none synchronous"},
		{Name: "mixed", Got: agVerdict([]replicaState{primary, {mode: "SYNCHRONOUS_COMMIT", state: "SYNCHRONIZED"}, {mode: "ASYNCHRONOUS_COMMIT", state: "SYNCHRONIZING"}}), Mode: sqlease.DurabilitySynchronous, Sync: 1, Async: 1, Detail: "1 synchronous"},
		{Name: "configuration only", Got: agVerdict([]replicaState{primary, {mode: "CONFIGURATION_ONLY"}}), Mode: sqlease.DurabilitySingle, Sync: 0, Async: 0, Detail: "without a data-bearing"},
		{Name: "on a secondary", Got: agVerdict([]replicaState{{mode: "SYNCHRONOUS_COMMIT", state: "SYNCHRONIZED", local: true}}), Mode: sqlease.DurabilityUnknown, Sync: 0, Async: 0, Detail: "secondary"},
		{Name: "azure", Got: azureVerdict(0), Mode: sqlease.DurabilitySynchronous, Sync: 0, Async: 0, Detail: "within the region"},
		{Name: "azure failover group", Got: azureVerdict(1), Mode: sqlease.DurabilityAsynchronous, Sync: 0, Async: 1, Detail: "geo-failover"},
	})
	for _, want := range []string{"sys.dm_hadr_database_replica_states", "sys.availability_replicas", "availability_mode_desc",
		"synchronization_state_desc", "DB_ID()"} {
		if !strings.Contains(replicaStatesQuery, want) {
			t.Errorf("replicaStatesQuery lacks %s", want)
		}
	}
}
