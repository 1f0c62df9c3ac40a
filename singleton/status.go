package singleton

import (
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// Statuses of a singleton as the fleet sees it (API.md "Singletons").
const (
	StatusStarting = "starting" // held, but not yet started under this term, or started and within its start grace without a heartbeat
	StatusRunning  = "running"
	StatusFailing  = "failing"  // FailingStarts failed starts in a row, and no run has lasted FailedStartWithin since; the row's LastError says why
	StatusStale    = "stale"    // running, past the start grace, heartbeat older than 2 × interval
	StatusPaused   = "paused"   // a paused daemon singleton
	StatusUnplaced = "unplaced" // no node holds its lease
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

// FleetStatus tells a singleton's status from its row and its lease (lease
// is the zero Lease when there is none), in database time: the row's Now.
func FleetStatus(row sqlstore.SingletonRow, lease sqlease.Lease, heartbeat time.Duration) string {
	switch {
	case row.Paused:
		return StatusPaused
	case lease.Epoch == 0 || lease.Expired():
		return StatusUnplaced
	case Failing(row):
		return StatusFailing
	case row.Holder != lease.Holder || row.Epoch != lease.Epoch || row.StartedAt.IsZero():
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
