package sqlserver

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/sqlease/sqlease"
)

// The statements of ReadReplication.
const (
	// engineEditionQuery: 5 is Azure SQL Database, 8 Azure SQL Managed
	// Instance; the others are SQL Server.
	engineEditionQuery = `SELECT CAST(SERVERPROPERTY('EngineEdition') AS int)`
	// replicaStatesQuery lists, for the current database, every replica of
	// its availability group with its commit mode and whether it is
	// synchronized. It needs VIEW SERVER STATE (SQL Server 2019 and
	// earlier) or VIEW SERVER PERFORMANCE STATE (2022); a database outside
	// any availability group has no row.
	replicaStatesQuery = `SELECT ar.availability_mode_desc, drs.synchronization_state_desc,
	CAST(drs.is_local AS int), CAST(ISNULL(drs.is_primary_replica, 0) AS int)
FROM sys.dm_hadr_database_replica_states AS drs
JOIN sys.availability_replicas AS ar ON ar.replica_id = drs.replica_id
WHERE drs.database_id = DB_ID()`
	// geoLinksQuery counts the geo-replication links (active
	// geo-replication, failover groups) of an Azure SQL Database; it needs
	// VIEW DATABASE STATE.
	geoLinksQuery = `SELECT COUNT(*) FROM sys.dm_geo_replication_link_status`
)

// replicaState is one row of replicaStatesQuery.
type replicaState struct {
	mode    string // SYNCHRONOUS_COMMIT, ASYNCHRONOUS_COMMIT, CONFIGURATION_ONLY
	state   string // SYNCHRONIZED, SYNCHRONIZING, NOT SYNCHRONIZING, …
	local   bool
	primary bool
}

// ReadReplication tells whether the current database's commits reach a
// secondary before they are acknowledged, as far as the role may read it
// (see sqlease.Durability):
//
//   - SQL Server and Managed Instance, from the database's availability
//     group: synchronous when a secondary with SYNCHRONOUS_COMMIT is
//     SYNCHRONIZED (the primary waits for it; a secondary catching up is
//     not waited for), asynchronous when the secondaries are
//     asynchronous-commit or not synchronized, single outside any
//     availability group, unknown on a secondary or without VIEW SERVER
//     STATE (the error is then in Detail, not returned);
//   - Azure SQL Database: its own high availability keeps a commit through
//     a failover within the region (remote storage, or quorum commit on
//     Business Critical), so synchronous — unless it has geo-replication
//     links (active geo-replication, failover groups), which are
//     asynchronous: a forced failover to the geo-secondary loses the last
//     commits, so asynchronous. Unknown without VIEW DATABASE STATE.
//
// Errors are those of reading the engine edition, classified.
func ReadReplication(ctx context.Context, db *sql.DB) (sqlease.Durability, error) {
	var edition int
	if err := db.QueryRowContext(ctx, engineEditionQuery).Scan(&edition); err != nil {
		return sqlease.Durability{}, fmt.Errorf("read replication state: %w", Classify(err))
	}
	if edition == 5 {
		var links int
		if err := db.QueryRowContext(ctx, geoLinksQuery).Scan(&links); err != nil {
			return sqlease.Durability{Mode: sqlease.DurabilityUnknown,
				Detail: fmt.Sprintf("Azure SQL Database: geo-replication links not readable (grant VIEW DATABASE STATE): %v", err)}, nil
		}
		return azureVerdict(links), nil
	}
	rows, err := db.QueryContext(ctx, replicaStatesQuery)
	if err != nil {
		return sqlease.Durability{Mode: sqlease.DurabilityUnknown,
			Detail: fmt.Sprintf("availability group state not readable (grant VIEW SERVER STATE): %v", err)}, nil
	}
	defer rows.Close()
	var states []replicaState
	for rows.Next() {
		var s replicaState
		var local, primary int
		if err := rows.Scan(&s.mode, &s.state, &local, &primary); err != nil {
			return sqlease.Durability{}, fmt.Errorf("read replication state: %w", Classify(err))
		}
		s.local, s.primary = local != 0, primary != 0
		states = append(states, s)
	}
	if err := rows.Err(); err != nil {
		return sqlease.Durability{}, fmt.Errorf("read replication state: %w", Classify(err))
	}
	return agVerdict(states), nil
}

func azureVerdict(links int) sqlease.Durability {
	if links > 0 {
		return sqlease.Durability{Mode: sqlease.DurabilityAsynchronous, Async: links,
			Detail: fmt.Sprintf("Azure SQL Database with %d geo-replication link(s) (active geo-replication or a failover group): asynchronous; a forced geo-failover loses the last commits", links)}
	}
	return sqlease.Durability{Mode: sqlease.DurabilitySynchronous,
		Detail: "Azure SQL Database without geo-replication: its own high availability keeps every commit through a failover within the region"}
}

func agVerdict(states []replicaState) sqlease.Durability {
	if len(states) == 0 {
		return sqlease.Durability{Mode: sqlease.DurabilitySingle, Detail: "the database is in no availability group"}
	}
	var d sqlease.Durability
	var notSynced []string
	for _, s := range states {
		if s.local {
			if !s.primary {
				return sqlease.Durability{Mode: sqlease.DurabilityUnknown, Detail: "the session is on a secondary replica of the availability group"}
			}
			continue
		}
		switch {
		case s.mode == "CONFIGURATION_ONLY":
			continue // holds no data
		case s.mode == "SYNCHRONOUS_COMMIT" && s.state == "SYNCHRONIZED":
			d.Sync++
		case s.mode == "SYNCHRONOUS_COMMIT":
			d.Async++
			notSynced = append(notSynced, strings.ToLower(s.state))
		default:
			d.Async++
		}
	}
	switch {
	case d.Sync > 0:
		d.Mode = sqlease.DurabilitySynchronous
		d.Detail = fmt.Sprintf("availability group: %d synchronous-commit secondary(ies) synchronized; commits wait for them", d.Sync)
	case d.Async > 0:
		d.Mode = sqlease.DurabilityAsynchronous
		d.Detail = fmt.Sprintf("availability group: %d secondary(ies), none synchronous-commit and synchronized: commits wait for none", d.Async)
	default:
		d.Mode = sqlease.DurabilitySingle
		d.Detail = "availability group without a data-bearing secondary"
	}
	if len(notSynced) > 0 {
		d.Detail += fmt.Sprintf(" (synchronous-commit but %s)", strings.Join(notSynced, ", "))
	}
	return d
}
