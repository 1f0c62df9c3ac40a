package mysql

import (
	"strings"
	"testing"

	"github.com/sqlease/sqlease"
)

func TestReplicationVerdict(t *testing.T) {
	for _, c := range []struct {
		name   string
		v      map[string]string
		mode   sqlease.DurabilityMode
		sync   int
		async  int
		detail string
	}{
		{"no binary log", map[string]string{"log_bin": "OFF", "slaves_connected": "0"}, sqlease.DurabilitySingle, 0, 0, "binary log is off"},
		{"mariadb alone", map[string]string{"log_bin": "ON", "slaves_connected": "0", "rpl_semi_sync_master_enabled": "OFF"}, sqlease.DurabilitySingle, 0, 0, "no replica"},
		{"mariadb async replica", map[string]string{"log_bin": "ON", "slaves_connected": "2", "rpl_semi_sync_master_enabled": "OFF"}, sqlease.DurabilityAsynchronous, 0, 2, "off"},
		{"mariadb semi-sync", map[string]string{"log_bin": "ON", "slaves_connected": "2", "rpl_semi_sync_master_enabled": "ON",
			"rpl_semi_sync_master_status": "ON", "rpl_semi_sync_master_clients": "1", "rpl_semi_sync_master_wait_point": "AFTER_SYNC",
			"rpl_semi_sync_master_timeout": "10000"}, sqlease.DurabilitySynchronous, 1, 1, "AFTER_SYNC"},
		{"semi-sync fell back", map[string]string{"log_bin": "ON", "slaves_connected": "1", "rpl_semi_sync_master_enabled": "ON",
			"rpl_semi_sync_master_status": "OFF", "rpl_semi_sync_master_clients": "1"}, sqlease.DurabilityAsynchronous, 0, 1, "fell back"},
		{"semi-sync, nobody there", map[string]string{"log_bin": "ON", "slaves_connected": "0", "rpl_semi_sync_master_enabled": "ON",
			"rpl_semi_sync_master_status": "ON", "rpl_semi_sync_master_clients": "0"}, sqlease.DurabilitySingle, 0, 0, "switched on"},
		{"mysql 8 source names", map[string]string{"log_bin": "ON", "rpl_semi_sync_source_enabled": "ON",
			"rpl_semi_sync_source_status": "ON", "rpl_semi_sync_source_clients": "2"}, sqlease.DurabilitySynchronous, 2, 0, "semi-synchronous"},
		{"mysql, cannot count", map[string]string{"log_bin": "ON"}, sqlease.DurabilityUnknown, 0, 0, "Slaves_connected"},
		{"galera", map[string]string{"wsrep_on": "ON", "wsrep_cluster_size": "3", "log_bin": "OFF"}, sqlease.DurabilitySynchronous, 2, 0, "Galera"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := replicationVerdict(c.v)
			if d.Mode != c.mode || d.Sync != c.sync || d.Async != c.async || !strings.Contains(d.Detail, c.detail) {
				t.Errorf("%v → %+v; want mode %s sync %d async %d, detail with %q", c.v, d, c.mode, c.sync, c.async, c.detail)
			}
		})
	}
}
