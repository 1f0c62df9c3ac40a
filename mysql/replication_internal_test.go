package mysql

import (
	"testing"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/storetest"
)

func TestReplicationVerdict(t *testing.T) {
	storetest.Verdicts(t, []storetest.Verdict{
		{Name: "no binary log", Got: replicationVerdict(map[string]string{"log_bin": "OFF", "slaves_connected": "0"}), Mode: sqlease.DurabilitySingle, Sync: 0, Async: 0, Detail: "binary log is off"},
		{Name: "mariadb alone", Got: replicationVerdict(map[string]string{"log_bin": "ON", "slaves_connected": "0", "rpl_semi_sync_master_enabled": "OFF"}), Mode: sqlease.DurabilitySingle, Sync: 0, Async: 0, Detail: "no replica"},
		{Name: "mariadb async replica", Got: replicationVerdict(map[string]string{"log_bin": "ON", "slaves_connected": "2", "rpl_semi_sync_master_enabled": "OFF"}), Mode: sqlease.DurabilityAsynchronous, Sync: 0, Async: 2, Detail: "off"},
		{Name: "mariadb semi-sync", Got: replicationVerdict(map[string]string{"log_bin": "ON", "slaves_connected": "2", "rpl_semi_sync_master_enabled": "ON",
			"rpl_semi_sync_master_status": "ON", "rpl_semi_sync_master_clients": "1", "rpl_semi_sync_master_wait_point": "AFTER_SYNC",
			"rpl_semi_sync_master_timeout": "10000"}), Mode: sqlease.DurabilitySynchronous, Sync: 1, Async: 1, Detail: "AFTER_SYNC"},
		{Name: "semi-sync fell back", Got: replicationVerdict(map[string]string{"log_bin": "ON", "slaves_connected": "1", "rpl_semi_sync_master_enabled": "ON",
			"rpl_semi_sync_master_status": "OFF", "rpl_semi_sync_master_clients": "1"}), Mode: sqlease.DurabilityAsynchronous, Sync: 0, Async: 1, Detail: "fell back"},
		{Name: "semi-sync, nobody there", Got: replicationVerdict(map[string]string{"log_bin": "ON", "slaves_connected": "0", "rpl_semi_sync_master_enabled": "ON",
			"rpl_semi_sync_master_status": "ON", "rpl_semi_sync_master_clients": "0"}), Mode: sqlease.DurabilitySingle, Sync: 0, Async: 0, Detail: "switched on"},
		{Name: "mysql 8 source names", Got: replicationVerdict(map[string]string{"log_bin": "ON", "rpl_semi_sync_source_enabled": "ON",
			"rpl_semi_sync_source_status": "ON", "rpl_semi_sync_source_clients": "2"}), Mode: sqlease.DurabilitySynchronous, Sync: 2, Async: 0, Detail: "semi-synchronous"},
		{Name: "mysql, cannot count", Got: replicationVerdict(map[string]string{"log_bin": "ON"}), Mode: sqlease.DurabilityUnknown, Sync: 0, Async: 0, Detail: "Slaves_connected"},
		{Name: "galera", Got: replicationVerdict(map[string]string{"wsrep_on": "ON", "wsrep_cluster_size": "3", "log_bin": "OFF"}), Mode: sqlease.DurabilitySynchronous, Sync: 2, Async: 0, Detail: "Galera"},
	})
}
