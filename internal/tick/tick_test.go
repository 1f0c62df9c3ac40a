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
	returned(t, done, "Every")
	if got := n.Load(); got != 3 {
		t.Errorf("fn called %d times, want 3 (the context ended at the third)", got)
	}
	if first < 20*time.Millisecond {
		t.Errorf("first call after %v, before the interval of 20ms", first)
	}
}

// Loop calls fn at once, again after the wait fn chose, again at once when
// woken (long before that wait), and returns once its context ends.
func TestLoop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	wake := make(chan struct{}, 1)
	calls := make(chan time.Time, 10)
	start := time.Now()
	var n atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick.Loop(ctx, wake, func() time.Duration {
			calls <- time.Now()
			if n.Add(1) == 1 {
				return 30 * time.Millisecond
			}
			return time.Hour
		})
	}()
	next := func(what string) time.Time {
		t.Helper()
		select {
		case at := <-calls:
			return at
		case <-time.After(10 * time.Second):
			t.Fatalf("no call %s", what)
			return time.Time{}
		}
	}
	if first := next("at once"); first.Sub(start) > 5*time.Second {
		t.Errorf("first call after %v, want at once", first.Sub(start))
	}
	if second := next("after the wait fn chose"); second.Sub(start) < 30*time.Millisecond {
		t.Errorf("second call after %v, before the 30ms fn chose", second.Sub(start))
	}
	wake <- struct{}{}
	next("when woken, an hour before the wait fn chose")
	cancel()
	returned(t, done, "Loop")
	if got := n.Load(); got != 3 {
		t.Errorf("fn called %d times, want 3", got)
	}
}

// returned fails the test unless done, closed when the loop returned, is
// closed within 10 s of the loop's context ending.
func returned(t *testing.T, done <-chan struct{}, loop string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return after its context ended", loop)
	}
}
