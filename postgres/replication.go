package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/sqlease/sqlease"
)

// replicationQuery reads, in one round trip on one session, what decides
// whether that session's commits reach a standby before they are
// acknowledged:
//
//   - synchronous_standby_names (server-wide) and synchronous_commit (the
//     session's: sqlease's sessions set it to on, durableCommits): a commit
//     waits for a standby only when the first is not empty and the second is
//     on, remote_write or remote_apply;
//   - pg_stat_replication: the connected standbys (walsenders of kind
//     'backup', a pg_basebackup, are not standbys). A role without
//     pg_read_all_stats sees a row per walsender but NULL in state and
//     sync_state, counted apart;
//   - pg_replication_slots: physical slots no walsender uses — a standby that
//     is expected (Patroni keeps a slot per member) but not connected, which
//     pg_stat_replication does not show. The view is readable by every role.
const replicationQuery = `SELECT pg_is_in_recovery(),
	current_setting('synchronous_standby_names'),
	current_setting('synchronous_commit'),
	(SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum') AND state = 'streaming'),
	(SELECT count(*) FROM pg_stat_replication WHERE sync_state IS NOT NULL AND state <> 'backup'
		AND NOT (sync_state IN ('sync', 'quorum') AND state = 'streaming')),
	(SELECT count(*) FROM pg_stat_replication WHERE sync_state IS NULL),
	(SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'physical' AND NOT active)`

// replicationState is what replicationQuery reads.
type replicationState struct {
	inRecovery       bool
	standbyNames     string // synchronous_standby_names
	syncCommit       string // synchronous_commit of the session
	sync, async      int    // connected standbys by sync_state (readable)
	hidden           int    // walsenders whose sync_state this role cannot read
	inactivePhysical int    // physical slots without a walsender
}

// ReadReplication tells whether the commits of db's sessions are replicated
// synchronously, as far as the role may read it (see sqlease.Durability):
//
//   - synchronous when synchronous_standby_names is set and the session's
//     synchronous_commit is on, remote_write or remote_apply — a commit then
//     waits for a named standby (and stalls while none is connected);
//   - asynchronous when standbys are connected, or physical replication
//     slots wait for one (Patroni's members), but a commit waits for none;
//   - single when the server knows of no standby: no walsender, no idle
//     physical slot. A streaming standby without a slot that is cut off looks
//     the same, since the primary no longer sees it;
//   - unknown on a standby (a read-only session).
//
// Sync and Async count the connected standbys; when the role lacks
// pg_read_all_stats their kind cannot be read (Detail says so) and they are
// counted as asynchronous only where no standby can be synchronous.
// db should be a pool of this package (Open), so that its sessions have the
// synchronous_commit sqlease commits with. Errors are the query's, classified.
func ReadReplication(ctx context.Context, db *sql.DB) (sqlease.Durability, error) {
	var s replicationState
	err := db.QueryRowContext(ctx, replicationQuery).Scan(&s.inRecovery, &s.standbyNames, &s.syncCommit,
		&s.sync, &s.async, &s.hidden, &s.inactivePhysical)
	if err != nil {
		return sqlease.Durability{}, fmt.Errorf("read replication state: %w", Classify(err))
	}
	return s.durability(), nil
}

func (s replicationState) durability() sqlease.Durability {
	if s.inRecovery {
		return sqlease.Durability{Mode: sqlease.DurabilityUnknown,
			Detail: "the session is on a standby (in recovery): connect with target_session_attrs=read-write"}
	}
	names := strings.TrimSpace(s.standbyNames)
	waits := names != "" && s.syncCommit != "off" && s.syncCommit != "local"
	d := sqlease.Durability{Sync: s.sync, Async: s.async}
	var why []string
	switch {
	case waits:
		d.Mode = sqlease.DurabilitySynchronous
		why = append(why, fmt.Sprintf("commits wait for a standby of synchronous_standby_names=%q (synchronous_commit=%s)", names, s.syncCommit))
		if s.hidden == 0 && s.sync == 0 {
			why = append(why, "no synchronous standby is connected: commits stall until one is")
		}
	case names != "":
		d.Mode = sqlease.DurabilityAsynchronous
		why = append(why, fmt.Sprintf("synchronous_commit=%s: this session's commits wait for no standby despite synchronous_standby_names=%q", s.syncCommit, names))
	default:
		// No standby can be synchronous: every walsender is an
		// asynchronous standby, readable or not.
		d.Async += s.hidden
		s.hidden = 0
		d.Mode = sqlease.DurabilityAsynchronous
		why = append(why, "synchronous_standby_names is empty: commits wait for no standby")
	}
	if s.hidden > 0 {
		why = append(why, fmt.Sprintf("%d walsender(s) whose kind this role cannot read (grant pg_read_all_stats)", s.hidden))
	}
	if s.inactivePhysical > 0 {
		why = append(why, fmt.Sprintf("%d physical replication slot(s) without a connected standby", s.inactivePhysical))
	}
	if d.Mode == sqlease.DurabilityAsynchronous && d.Sync+d.Async+s.hidden+s.inactivePhysical == 0 {
		d.Mode = sqlease.DurabilitySingle
		why = []string{"no standby is connected and no physical replication slot waits for one"}
	}
	if s.syncCommit == "off" {
		why = append(why, "synchronous_commit=off: even the local flush is not awaited")
	}
	d.Detail = strings.Join(why, "; ")
	return d
}
