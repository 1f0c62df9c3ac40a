package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/sqlease/sqlease"
)

// The settings and counters ReadReplication reads: SHOW … WHERE needs no
// privilege, and a name the server does not have is simply absent (MySQL
// 8.0.26 renamed master to source; the semi-synchronous ones exist only
// with the plugin loaded there, built in on MariaDB 10.3 and later;
// Slaves_connected is MariaDB's; wsrep_on is Galera's).
const (
	replicationVariables = `SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'wsrep_on',
	'rpl_semi_sync_master_enabled', 'rpl_semi_sync_source_enabled',
	'rpl_semi_sync_master_timeout', 'rpl_semi_sync_source_timeout',
	'rpl_semi_sync_master_wait_point', 'rpl_semi_sync_source_wait_point')`
	replicationStatus = `SHOW GLOBAL STATUS WHERE Variable_name IN ('Slaves_connected',
	'Rpl_semi_sync_master_status', 'Rpl_semi_sync_source_status',
	'Rpl_semi_sync_master_clients', 'Rpl_semi_sync_source_clients', 'wsrep_cluster_size')`
)

// ReadReplication tells whether the server's commits reach a replica before
// they are acknowledged, as far as any role may read it (see
// sqlease.Durability):
//
//   - synchronous when semi-synchronous replication is switched on, active
//     (Rpl_semi_sync_master_status ON) and at least one semi-synchronous
//     replica is connected, or when the server is a Galera node
//     (wsrep_on); a semi-synchronous primary falls back to asynchronous by
//     itself once a commit has waited rpl_semi_sync_master_timeout
//     (default 10 s) for an acknowledgement;
//   - asynchronous when replicas are connected (Slaves_connected,
//     MariaDB) but commits wait for none of them;
//   - single with the binary log off (nothing can replicate), or with no
//     replica connected;
//   - unknown when the server does not say how many replicas it has
//     (MySQL has no Slaves_connected) and semi-synchronous replication is
//     off.
//
// Errors are the queries', classified.
func ReadReplication(ctx context.Context, db *sql.DB) (sqlease.Durability, error) {
	vars := map[string]string{}
	for _, q := range []string{replicationVariables, replicationStatus} {
		if err := readPairs(ctx, db, q, vars); err != nil {
			return sqlease.Durability{}, fmt.Errorf("read replication state: %w", Classify(err))
		}
	}
	return replicationVerdict(vars), nil
}

func readPairs(ctx context.Context, db *sql.DB, q string, into map[string]string) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return err
		}
		into[strings.ToLower(k)] = v
	}
	return rows.Err()
}

// replicationVerdict judges the variables and status counters (names in
// lower case) ReadReplication read.
func replicationVerdict(v map[string]string) sqlease.Durability {
	get := func(names ...string) (string, bool) {
		for _, n := range names {
			if s, ok := v[n]; ok {
				return s, true
			}
		}
		return "", false
	}
	on := func(names ...string) bool {
		s, _ := get(names...)
		return strings.EqualFold(s, "ON") || s == "1"
	}
	count := func(names ...string) (int, bool) {
		s, ok := get(names...)
		if !ok {
			return 0, false
		}
		n, err := strconv.Atoi(s)
		return n, err == nil
	}
	if on("wsrep_on") {
		size, _ := count("wsrep_cluster_size")
		return sqlease.Durability{Mode: sqlease.DurabilitySynchronous, Sync: max(size-1, 0),
			Detail: fmt.Sprintf("Galera node (wsrep_on) in a cluster of %d: a commit is certified by every node before it is acknowledged", size)}
	}
	if !on("log_bin") {
		return sqlease.Durability{Mode: sqlease.DurabilitySingle, Detail: "the binary log is off: no replica can stream this server's commits"}
	}
	connected, known := count("slaves_connected")
	enabled := on("rpl_semi_sync_master_enabled", "rpl_semi_sync_source_enabled")
	active := on("rpl_semi_sync_master_status", "rpl_semi_sync_source_status")
	clients, _ := count("rpl_semi_sync_master_clients", "rpl_semi_sync_source_clients")
	timeout, _ := get("rpl_semi_sync_master_timeout", "rpl_semi_sync_source_timeout")
	waitPoint, _ := get("rpl_semi_sync_master_wait_point", "rpl_semi_sync_source_wait_point")
	connected = max(connected, clients)
	switch {
	case enabled && active && clients > 0:
		return sqlease.Durability{Mode: sqlease.DurabilitySynchronous, Sync: clients, Async: connected - clients,
			Detail: fmt.Sprintf("semi-synchronous replication active with %d replica(s) acknowledging (wait point %s); after %s ms without an acknowledgement the server falls back to asynchronous by itself",
				clients, waitPoint, timeout)}
	case enabled && connected > 0:
		return sqlease.Durability{Mode: sqlease.DurabilityAsynchronous, Async: connected,
			Detail: fmt.Sprintf("semi-synchronous replication switched on but not active (fell back after %s ms without an acknowledgement, or no semi-synchronous replica): commits wait for no replica", timeout)}
	case connected > 0:
		return sqlease.Durability{Mode: sqlease.DurabilityAsynchronous, Async: connected,
			Detail: "replicas connected, semi-synchronous replication off: commits wait for no replica"}
	case known || enabled:
		d := sqlease.Durability{Mode: sqlease.DurabilitySingle, Detail: "binary log on, no replica connected"}
		if enabled {
			d.Detail += fmt.Sprintf("; semi-synchronous replication is switched on: commits wait up to %s ms for one, then go on", timeout)
		}
		return d
	}
	return sqlease.Durability{Mode: sqlease.DurabilityUnknown,
		Detail: "binary log on and semi-synchronous replication off; the server does not say how many replicas stream from it (no Slaves_connected)"}
}
