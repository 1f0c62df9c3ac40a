package multiproc

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sqlease/sqlease/internal/fleettest"
)

// Fleet is a set of worker processes and the log of their events: the
// shared real-process harness (internal/fleettest's Workers) with this
// package's worker configuration, and Verify. Its methods must be called
// from the test goroutine (they may call t.Fatal).
type Fleet struct {
	*fleettest.Workers[Event, *Event, WorkerConfig]
}

// Proc is one worker process.
type Proc = fleettest.Proc

// NewFleet returns an empty fleet whose workers get base (the holder id is
// w<index>). Its cleanup kills any worker still running and, if the test
// failed, logs the events and the workers' stderr.
func NewFleet(t testing.TB, base WorkerConfig) *Fleet {
	f := &Fleet{fleettest.NewWorkers[Event](t, "multiproc", base)}
	f.Format = summarize
	return f
}

// summarize renders the event log with runs of routine lines (the leader's
// acted and fenced_ok) summarised.
func summarize(events []Event) string {
	var b strings.Builder
	var run []Event
	flush := func() {
		if len(run) > 0 {
			fmt.Fprintf(&b, "    … %d acted/fenced_ok by %s@%d (seq %d-%d)\n", len(run), run[0].Holder, run[0].Epoch, run[0].Seq, run[len(run)-1].Seq)
			run = run[:0]
		}
	}
	for _, e := range events {
		if (e.Ev == EvActed || e.Ev == EvFencedOK) && e.Actor == "" {
			if len(run) > 0 && (run[0].Holder != e.Holder || run[0].Epoch != e.Epoch) {
				flush()
			}
			run = append(run, e)
			continue
		}
		flush()
		fmt.Fprintf(&b, "  %s\n", e)
	}
	flush()
	return b.String()
}
