package postgres

import (
	"strings"

	"github.com/sqlease/sqlease/sqlstore"
)

// Epochs across a failover.
//
// An asynchronous streaming replica that is promoted holds a prefix of the
// old primary's writes: every acquire, renew and claim it had not received
// is lost. Were the epoch a plain counter, the new primary would hand the
// lost epochs out a second time, to other holders, and the first epoch after
// the failover would not be above the highest one issued before it — a
// downstream fence that rejects "an epoch below the highest seen" would
// reject the new leader and accept a second holder under an equal epoch. And
// a holder whose acquire or last renews were lost still believes it leads,
// up to its local deadline, while the promoted copy shows an older term, or
// an expired one, that the next acquire takes at once.
//
// So on PostgreSQL every epoch the database hands out (lease acquire,
// advisory takeover — worker and singleton leases are leases too — and the
// jobs' lock_epoch) folds in the server's timeline, which a promotion (and a
// point-in-time recovery) increments:
//
//	epoch = GREATEST(old + 1, ((timeline - 1) << 32) | 1)
//
// read in the same statement from pg_walfile_name(pg_current_wal_lsn())
// (its first 8 hex digits; pg_control_checkpoint() shows the old timeline
// for seconds after a promotion, and both functions are granted to PUBLIC).
// On timeline 1 this is old + 1: a deployment that never failed over sees no
// difference. A new timeline's first epoch is above every epoch of the older
// ones as long as fewer than 2^32 were issued per timeline.
//
// Hold-off. An epoch whose high half is below the current timeline's
// (epoch < (timeline - 1) << 32) is a term of an older timeline, and such a
// term may be acting on writes the new primary never saw. Three rules keep
// it from overlapping a term of the new timeline:
//
//   - A renew (lease and advisory session) succeeds only for a term of the
//     current timeline: every older term ends at its next renew, which its
//     holder sends at the latest at its local deadline.
//   - The first acquire or takeover on a new timeline (of any lease name)
//     records in a reserved row of the leases table (lease_name
//     timelineMarker, epoch (timeline - 1) << 32) that the timeline was first
//     seen now, and that no term may begin on it before now + H, H being the
//     larger of the acquirer's lease duration and the longest duration
//     (expires_at − renewed_at) of any lease row. Until then every acquire
//     or takeover that finds a row of an older timeline, or no row, does not
//     take it: it turns it, in the same statement, into a hold-off row owned
//     by nobody (holder holdOffHolder, which no holder id can equal since it
//     has spaces; epoch (timeline - 1) << 32; lease_locked false, so that no
//     lock winner deposes it) that expires at the end of the hold-off, and
//     reports the lease as held. Followers then see a lease held until that
//     instant and poll once it is due; the next acquire gets
//     ((timeline - 1) << 32) | 1.
//   - Claims made under a worker lease of an older timeline are refused,
//     so claim mode waits for the hold-off too (its workers re-acquire
//     their worker leases after it).
//
// Why H after the first sighting is enough: a holder trusts its lease for at
// most its lease duration (minus the safety margin) from the moment it sent
// its last acquire or renew that succeeded, and only the old primary
// acknowledged those of an older timeline's term (on the new one they fail).
// The old primary acknowledged them before it died, which was before the
// promotion, which is before any statement runs on the new timeline, which
// is before its first sighting. So one lease duration after the first
// sighting every term of an older timeline has passed its local deadline.
// This needs, as every HA setup does, that the old primary is stopped (or
// cut off from every client) before the replica is promoted — an old
// primary that keeps acknowledging writes is a split brain no database
// protocol undoes — and that no node's lease duration exceeds H (a fleet
// shares one), and the clocks of the members to agree within the safety
// margin, since database time moves from one host to the other.
//
// The marker's instant starts the hold-off for lease names the old primary
// alone knew (an acquire of a new name lost with it) too; an acquire of a
// new name after the hold-off inserts its row with the timeline's epoch at
// once, so a node that starts long after a failover does not wait.
//
// On timeline 1 none of this runs: no marker, no hold-off, no refused
// renew. A database restored into a new cluster (timeline 1) with epochs of
// a later timeline keeps counting from them (old + 1), without hold-off.
//
// What holds where (the README's table):
//   - a single server, or a synchronous replica (synchronous_commit = on,
//     remote_apply or remote_write with synchronous_standby_names, which
//     the sessions' durableCommits keeps on): no acknowledged write is lost;
//     G1–G6 hold, and a failover just moves database time to another host.
//   - an asynchronous replica promoted: epochs never repeat and never go
//     back (G2, G7); no two actors at once (G1), since the new timeline holds
//     off for a lease duration; acknowledged writes of the last moments
//     (jobs created, runs finished, intents) may be lost (G6 does not hold
//     for them): work done but not recorded may be done again (G3's
//     at-least-once with a stable key).
const (
	// timelineMarker is the reserved lease name of the row that records
	// when the current timeline was first seen: not a valid lease name
	// (it has a space), so no caller can acquire, read or list it.
	timelineMarker = "sqlease timeline"
	// holdOffHolder is the holder of a row held off on a new timeline: not
	// a valid holder id (it has spaces), so nobody can renew, release or
	// fence it.
	holdOffHolder = "sqlease failover hold-off"
	// timelineBase is (timeline - 1) << 32, read from the WAL file name of
	// the current WAL position: its first 8 hex digits are the timeline.
	timelineBase = `(((('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint) - 1) << 32)`
)

// leaseUpsert is the statement of Acquire and of the advisory takeover:
// insert the row ($1 name, $2 holder, $3 ttl ms) or take over the existing
// one when take (SQL over l, the row, and x, its expiry instant passed as
// EXCLUDED.acquired_at) holds — honouring the hold-off of a new timeline —
// with lease_locked = locked; it returns the row taken, and no row when the
// lease is held (or held off).
//
// The values the conflict branch needs (the timeline, whether a hold-off
// runs, its end) reach it through EXCLUDED: the inserted row is a hold-off
// row (holder holdOffHolder, epoch tl, expiring at the hold-off's end)
// exactly when a hold-off runs.
func leaseUpsert(leases, take, locked string) string {
	return strings.NewReplacer("{leases}", leases, "{take}", take, "{locked}", locked,
		"{tl}", timelineBase, "{marker}", timelineMarker, "{holdoff}", holdOffHolder, "{presence}", sqlstore.NodeLeasePrefix,
		"{ttl}", "$3::bigint * interval '1 millisecond'",
		// A hold-off runs (in the conflict branch), and the row is of an
		// older timeline: it becomes a hold-off row.
		"{convert}", `(EXCLUDED.holder_id = '`+holdOffHolder+`' AND l.lease_epoch < EXCLUDED.lease_epoch)`,
		// Its term may be taken: no hold-off runs, or the row is of this
		// timeline (a hold-off row that has expired, or epochs restored
		// from a later timeline).
		"{allowed}", `(EXCLUDED.holder_id <> '`+holdOffHolder+`' OR l.lease_epoch >= (EXCLUDED.lease_epoch >> 32) << 32)`,
	).Replace(`WITH n AS (SELECT clock_timestamp() AS now, {tl} AS tl),
h AS (
	-- The hold-off's end on a timeline after the first: recorded by the
	-- first acquire that saw it, or from now on. NULL on timeline 1.
	SELECT n.now, n.tl, CASE WHEN n.tl = 0 THEN NULL ELSE COALESCE(
		(SELECT m.expires_at FROM {leases} m WHERE m.lease_name = '{marker}' AND m.lease_epoch >= n.tl),
		n.now + GREATEST({ttl}, (SELECT max(o.expires_at - o.renewed_at) FROM {leases} o
			WHERE o.lease_name <> '{marker}' AND o.lease_name NOT LIKE '{presence}%')))
	END AS until FROM n
),
k AS (
	-- A presence lease fences nothing: it is never held off, and neither
	-- its duration (90 s) nor its acquire sets the hold-off's length.
	SELECT h.now, h.tl, h.until, h.until > h.now AND $1 NOT LIKE '{presence}%' AS holding FROM h
),
m AS (
	INSERT INTO {leases} AS l (lease_name, holder_id, lease_epoch, acquired_at, renewed_at, expires_at)
	SELECT '{marker}', '{holdoff}', k.tl, k.now, k.now, k.until FROM k
	WHERE k.holding AND NOT EXISTS (SELECT 1 FROM {leases} x WHERE x.lease_name = '{marker}' AND x.lease_epoch >= k.tl)
	ON CONFLICT (lease_name) DO UPDATE SET lease_epoch = EXCLUDED.lease_epoch,
		acquired_at = EXCLUDED.acquired_at, renewed_at = EXCLUDED.renewed_at, expires_at = EXCLUDED.expires_at
	WHERE l.lease_epoch < EXCLUDED.lease_epoch
),
a AS (
	INSERT INTO {leases} AS l (lease_name, holder_id, lease_epoch, acquired_at, renewed_at, expires_at, lease_locked)
	SELECT $1, CASE WHEN k.holding THEN '{holdoff}' ELSE $2 END,
		CASE WHEN k.holding THEN k.tl ELSE k.tl | 1 END, k.now, k.now,
		CASE WHEN k.holding THEN k.until ELSE k.now + {ttl} END, {locked} AND k.holding IS NOT TRUE FROM k
	ON CONFLICT (lease_name) DO UPDATE SET
		holder_id = CASE WHEN {convert} THEN '{holdoff}' ELSE $2 END,
		lease_epoch = CASE WHEN {convert} THEN (EXCLUDED.lease_epoch >> 32) << 32
			ELSE GREATEST(l.lease_epoch + 1, ((EXCLUDED.lease_epoch >> 32) << 32) | 1) END,
		acquired_at = EXCLUDED.acquired_at,
		renewed_at = EXCLUDED.renewed_at,
		expires_at = CASE WHEN {convert} THEN GREATEST(EXCLUDED.expires_at, l.expires_at) ELSE EXCLUDED.acquired_at + {ttl} END,
		lease_locked = {locked} AND NOT {convert}
	WHERE {convert} OR ({take}) AND {allowed}
	RETURNING l.holder_id, l.lease_epoch, l.acquired_at, l.renewed_at, l.expires_at
)
SELECT a.lease_epoch, a.acquired_at, a.renewed_at, a.expires_at, a.acquired_at FROM a WHERE a.holder_id <> '{holdoff}'`)
}

// renewTimeline is the condition a renew adds: the row's term is of the
// current timeline (see above).
const renewTimeline = `l.lease_epoch >= ` + timelineBase
