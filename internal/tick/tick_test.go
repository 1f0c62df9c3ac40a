package tick_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/tick"
)

// Every calls fn at its interval, not before the first interval has
// passed, and returns once its context ends, calling fn no more.
func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	start := time.Now()
	var first time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick.Every(ctx, 20*time.Millisecond, func() {
			if n.Add(1) == 1 {
				first = time.Since(start)
			}
			if n.Load() == 3 {
				cancel()
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return after its context ended")
	}
	if got := n.Load(); got != 3 {
		t.Errorf("fn called %d times, want 3 (the context ended at the third)", got)
	}
	if first < 20*time.Millisecond {
		t.Errorf("first call after %v, before the interval of 20ms", first)
	}
}
