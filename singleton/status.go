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
	StatusStale    = "stale"    // running, past the start grace, heartbeat older than 2 × interval
	StatusPaused   = "paused"   // a paused daemon singleton
	StatusUnplaced = "unplaced" // no node holds its lease
)

// FleetStatus tells a singleton's status from its row and its lease (lease
// is the zero Lease when there is none), in database time: the row's Now.
func FleetStatus(row sqlstore.SingletonRow, lease sqlease.Lease, heartbeat time.Duration) string {
	switch {
	case row.Paused:
		return StatusPaused
	case lease.Epoch == 0 || lease.Expired():
		return StatusUnplaced
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
