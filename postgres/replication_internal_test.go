package postgres

import (
	"testing"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/storetest"
)

// The verdict for each state the server can be in, including what a role
// without pg_read_all_stats sees (hidden walsenders).
func TestReplicationVerdict(t *testing.T) {
	storetest.Verdicts(t, []storetest.Verdict{
		{Name: "single", Got: replicationState{syncCommit: "on"}.durability(), Mode: sqlease.DurabilitySingle, Sync: 0, Async: 0, Detail: "no standby"},
		{Name: "async standby", Got: replicationState{syncCommit: "on", async: 1}.durability(), Mode: sqlease.DurabilityAsynchronous, Sync: 0, Async: 1, Detail: "empty"},
		{Name: "async standby, unprivileged", Got: replicationState{syncCommit: "on", hidden: 1}.durability(), Mode: sqlease.DurabilityAsynchronous, Sync: 0, Async: 1, Detail: "empty"},
		{Name: "standby cut off, slot kept", Got: replicationState{syncCommit: "on", inactivePhysical: 1}.durability(), Mode: sqlease.DurabilityAsynchronous, Sync: 0, Async: 0, Detail: "1 physical replication slot"},
		{Name: "patroni synchronous_mode", Got: replicationState{standbyNames: "m2", syncCommit: "on", sync: 1}.durability(), Mode: sqlease.DurabilitySynchronous, Sync: 1, Async: 0, Detail: `"m2"`},
		{Name: "quorum", Got: replicationState{standbyNames: "ANY 1 (m2, m3)", syncCommit: "remote_apply", sync: 2}.durability(), Mode: sqlease.DurabilitySynchronous, Sync: 2, Async: 0, Detail: "ANY 1"},
		{Name: "sync, unprivileged", Got: replicationState{standbyNames: "m2", syncCommit: "on", hidden: 2}.durability(), Mode: sqlease.DurabilitySynchronous, Sync: 0, Async: 0, Detail: "pg_read_all_stats"},
		{Name: "sync named, none connected", Got: replicationState{standbyNames: "*", syncCommit: "on"}.durability(), Mode: sqlease.DurabilitySynchronous, Sync: 0, Async: 0, Detail: "stall"},
		{Name: "session local", Got: replicationState{standbyNames: "m2", syncCommit: "local", sync: 1}.durability(), Mode: sqlease.DurabilityAsynchronous, Sync: 1, Async: 0, Detail: "synchronous_commit=local"},
		{Name: "session off, no standby", Got: replicationState{syncCommit: "off"}.durability(), Mode: sqlease.DurabilitySingle, Sync: 0, Async: 0, Detail: "local flush"},
		{Name: "standby session", Got: replicationState{inRecovery: true, syncCommit: "on"}.durability(), Mode: sqlease.DurabilityUnknown, Sync: 0, Async: 0, Detail: "read-write"},
	})
}
