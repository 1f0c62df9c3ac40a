package singleton

import (
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// Statuses of a singleton as the fleet sees it (API.md "Singletons").
const (
	StatusStarting = "starting" // assigned, but not yet started under this generation, or started and within its start grace without a heartbeat
	StatusRunning  = "running"
	StatusFailing  = "failing"  // FailingStarts failed starts in a row, and no run has lasted FailedStartWithin since; the row's LastError says why
	StatusStale    = "stale"    // running, past the start grace, heartbeat older than 2 × interval
	StatusPaused   = "paused"   // a paused daemon singleton
	StatusUnplaced = "unplaced" // not assigned to a live node
)

// A failed start is a run that ended on its own — the body returned, the
// process exited or could not be started — within FailedStartWithin of its
// start. After FailingStarts of them in a row a singleton is failing, until
// a run has lasted FailedStartWithin: a crash loop (a command not found, a
// process that exits at once) shows as failing with the reason, not as
// starting forever.
const (
	FailingStarts     = 3
	FailedStartWithin = 10 * time.Second
)

// FleetStatus tells a singleton's status from its row and the member lease
// of the node it is assigned to (MemberPrefix + row.Node; the zero Lease
// when there is none), in database time: the row's Now. It is placed while
// that lease is live under the assignment's node epoch; it runs under the
// assignment's generation once the node has started it.
func FleetStatus(row sqlstore.SingletonRow, member sqlease.Lease, heartbeat time.Duration) string {
	switch {
	case row.Paused:
		return StatusPaused
	case !Placed(row, member):
		return StatusUnplaced
	case Failing(row):
		return StatusFailing
	case row.Holder != row.Node || row.Epoch != row.Generation || row.StartedAt.IsZero():
		return StatusStarting
	}
	grace := 2 * heartbeat
	sinceStart, sinceBeat := row.Now.Sub(row.StartedAt), row.Now.Sub(row.HeartbeatAt)
	switch {
	case sinceStart < grace && !row.HeartbeatAt.After(row.StartedAt):
		return StatusStarting
	case sinceStart >= grace && sinceBeat > grace:
		return StatusStale
	default:
		return StatusRunning
	}
}

// Placed reports whether row's assignment is live: member is the member
// lease of its node, live (as of its reading) under the epoch the
// assignment was made under.
func Placed(row sqlstore.SingletonRow, member sqlease.Lease) bool {
	return row.Node != "" && row.Generation > 0 && member.Name == MemberPrefix+row.Node && member.Holder == row.Node &&
		member.Epoch == row.NodeEpoch && !member.Expired()
}

// Failing reports whether row's last FailingStarts runs or more were failed
// starts and no run has lasted FailedStartWithin since (in database time):
// the one started after the last failure is still younger, or there is none
// (waiting to restart).
func Failing(row sqlstore.SingletonRow) bool {
	if row.Failures < FailingStarts {
		return false
	}
	recovered := row.StartedAt.After(row.LastErrorAt) && row.Now.Sub(row.StartedAt) >= FailedStartWithin
	return !recovered
}
