// Package tick holds the loops that call a function again and again until
// their context ends: at a fixed interval (Every: the daemon's periodic
// re-reads, the test house's periodic loads and faults), or after a wait
// the function itself chooses, sooner when woken (Loop: a reconciler).
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

// Loop calls fn at once, then again when the wait fn returned has passed or
// wake receives, whichever comes first, until ctx ends. A nil wake never
// receives. A wake during fn is kept by its channel's buffer, if it has
// one, and makes the next call come at once.
func Loop(ctx context.Context, wake <-chan struct{}, fn func() time.Duration) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
		}
		// Since Go 1.23 a Reset timer never delivers a stale time: no
		// draining after a wake.
		t.Reset(fn())
	}
}
