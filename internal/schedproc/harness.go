package schedproc

import (
	"fmt"
	"testing"

	"github.com/sqlease/sqlease/internal/fleettest"
)

// Fleet is a set of worker processes and the log of their events (the
// shared real-process harness, package internal/fleettest, with this
// package's worker configuration). Its methods must be called from the test
// goroutine (they may call t.Fatal).
type Fleet struct {
	*fleettest.Fleet[Event, *Event]
	base WorkerConfig
}

// Proc is one worker process.
type Proc = fleettest.Proc

// NewFleet returns an empty fleet whose workers get base (Holder is set per
// worker). Its cleanup kills any worker still running and, if the test
// failed, logs the events and the workers' warnings and stderr.
func NewFleet(t testing.TB, base WorkerConfig) *Fleet {
	return &Fleet{Fleet: fleettest.New[Event](t, "schedproc"), base: base}
}

// Start launches n workers, waits until each reports ready, then tells them
// all to go at once.
func (f *Fleet) Start(n int, edit func(*WorkerConfig)) []*Proc {
	f.T().Helper()
	from := f.Mark()
	procs := make([]*Proc, n)
	for i := range procs {
		procs[i] = f.Launch(edit)
	}
	f.Go(from, procs...)
	return procs
}

// Launch starts one worker (holder w<index>) without telling it to go.
func (f *Fleet) Launch(edit func(*WorkerConfig)) *Proc {
	f.T().Helper()
	cfg := f.base
	cfg.Holder = fmt.Sprintf("w%d", len(f.Procs()))
	if edit != nil {
		edit(&cfg)
	}
	env, err := cfg.Env()
	if err != nil {
		f.T().Fatalf("schedproc: %v", err)
	}
	return f.Fleet.Launch(cfg.Holder, env)
}
