package postgres

import (
	"strings"
	"testing"

	"github.com/sqlease/sqlease"
)

// The verdict for each state the server can be in, including what a role
// without pg_read_all_stats sees (hidden walsenders).
func TestReplicationVerdict(t *testing.T) {
	for _, c := range []struct {
		name   string
		s      replicationState
		mode   sqlease.DurabilityMode
		sync   int
		async  int
		detail string
	}{
		{"single", replicationState{syncCommit: "on"}, sqlease.DurabilitySingle, 0, 0, "no standby"},
		{"async standby", replicationState{syncCommit: "on", async: 1}, sqlease.DurabilityAsynchronous, 0, 1, "empty"},
		{"async standby, unprivileged", replicationState{syncCommit: "on", hidden: 1}, sqlease.DurabilityAsynchronous, 0, 1, "empty"},
		{"standby cut off, slot kept", replicationState{syncCommit: "on", inactivePhysical: 1}, sqlease.DurabilityAsynchronous, 0, 0, "1 physical replication slot"},
		{"patroni synchronous_mode", replicationState{standbyNames: "m2", syncCommit: "on", sync: 1}, sqlease.DurabilitySynchronous, 1, 0, `"m2"`},
		{"quorum", replicationState{standbyNames: "ANY 1 (m2, m3)", syncCommit: "remote_apply", sync: 2}, sqlease.DurabilitySynchronous, 2, 0, "ANY 1"},
		{"sync, unprivileged", replicationState{standbyNames: "m2", syncCommit: "on", hidden: 2}, sqlease.DurabilitySynchronous, 0, 0, "pg_read_all_stats"},
		{"sync named, none connected", replicationState{standbyNames: "*", syncCommit: "on"}, sqlease.DurabilitySynchronous, 0, 0, "stall"},
		{"session local", replicationState{standbyNames: "m2", syncCommit: "local", sync: 1}, sqlease.DurabilityAsynchronous, 1, 0, "synchronous_commit=local"},
		{"session off, no standby", replicationState{syncCommit: "off"}, sqlease.DurabilitySingle, 0, 0, "local flush"},
		{"standby session", replicationState{inRecovery: true, syncCommit: "on"}, sqlease.DurabilityUnknown, 0, 0, "read-write"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := c.s.durability()
			if d.Mode != c.mode || d.Sync != c.sync || d.Async != c.async || !strings.Contains(d.Detail, c.detail) {
				t.Errorf("%+v → %+v; want mode %s sync %d async %d, detail with %q", c.s, d, c.mode, c.sync, c.async, c.detail)
			}
		})
	}
}
