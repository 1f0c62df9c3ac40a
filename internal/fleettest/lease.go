package fleettest

import (
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
)

// Lease is the election of a fleet of library workers: the lease's name and
// the elector's timings. The multiproc and schedproc workers embed it in
// their configuration and build their elector with Config.
type Lease struct {
	LeaseName       string
	LeaseDuration   time.Duration
	RenewInterval   time.Duration
	AcquireInterval time.Duration
	AcquireJitter   float64
	SafetyMargin    time.Duration
}

// FastLease is the lease every worker fleet runs: short enough that a crash
// failover, bounded by LeaseDuration + AcquireInterval×(1+AcquireJitter) ≈
// 1.12 s, takes little of a test's time.
func FastLease(name string) Lease {
	return Lease{
		LeaseName:       name,
		LeaseDuration:   1 * time.Second,
		RenewInterval:   250 * time.Millisecond,
		AcquireInterval: 100 * time.Millisecond,
		AcquireJitter:   0.2,
		SafetyMargin:    200 * time.Millisecond,
	}
}

// FailoverBound is the crash failover's bound, LeaseDuration +
// AcquireInterval×(1+AcquireJitter), plus slack for a loaded two-core
// machine running several race-enabled processes.
func (l Lease) FailoverBound(slack time.Duration) time.Duration {
	return l.LeaseDuration + time.Duration(float64(l.AcquireInterval)*(1+l.AcquireJitter)) + slack
}

// Config is the elector configuration of holder on store with this lease;
// the caller adds its callbacks, logger and observer.
func (l Lease) Config(store sqlease.LeaseStore, holder string) election.Config {
	return election.Config{
		Store:           store,
		LeaseName:       l.LeaseName,
		HolderID:        holder,
		LeaseDuration:   l.LeaseDuration,
		RenewInterval:   l.RenewInterval,
		AcquireInterval: l.AcquireInterval,
		AcquireJitter:   l.AcquireJitter,
		SafetyMargin:    l.SafetyMargin,
	}
}
