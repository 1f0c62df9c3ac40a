// Package tick is the one loop that calls a function at a fixed interval
// until its context ends: the daemon's periodic re-reads and the test
// house's periodic loads and faults.
package tick

import (
	"context"
	"time"
)

// Every calls fn every d, the first time d after the call, until ctx ends.
// A call of fn that takes longer than d delays the next one: the ticks
// missed meanwhile are dropped, not made up.
func Every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
	}
}
