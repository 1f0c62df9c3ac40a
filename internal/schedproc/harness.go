package schedproc

import (
	"testing"

	"github.com/sqlease/sqlease/internal/fleettest"
)

// Fleet is a set of worker processes and the log of their events: the
// shared real-process harness (internal/fleettest's Workers) with this
// package's worker configuration. Its methods must be called from the test
// goroutine (they may call t.Fatal).
type Fleet struct {
	*fleettest.Workers[Event, *Event, WorkerConfig]
}

// Proc is one worker process.
type Proc = fleettest.Proc

// NewFleet returns an empty fleet whose workers get base (the holder id is
// w<index>). Its cleanup kills any worker still running and, if the test
// failed, logs the events and the workers' warnings and stderr.
func NewFleet(t testing.TB, base WorkerConfig) *Fleet {
	return &Fleet{fleettest.NewWorkers[Event](t, "schedproc", base)}
}
