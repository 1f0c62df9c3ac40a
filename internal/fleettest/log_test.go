package fleettest

import (
	"sync"
	"testing"
	"time"
)

// TestLogWakesWaiters: a waiter sees an item added after it began waiting
// as soon as it is added, not at its deadline; positions are handed out in
// order to concurrent writers; a wait for what never comes ends at its
// deadline.
func TestLogWakesWaiters(t *testing.T) {
	var l Log[int]
	got := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		v, ok := l.TryWait(0, 10*time.Second, func(v int) bool { return v == 42 })
		if !ok || v != 42 {
			t.Errorf("TryWait = %d, %v; want 42, true", v, ok)
		}
		got <- time.Since(start)
	}()
	time.Sleep(50 * time.Millisecond) // the waiter is waiting
	l.Add(func(int) int { return 7 })
	l.Add(func(int) int { return 42 })
	if d := <-got; d > 5*time.Second {
		t.Fatalf("the waiter saw the item after %v: not woken by Add", d)
	}

	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { l.Add(func(i int) int { return 1000 + i }) })
	}
	wg.Wait()
	for i, v := range l.All()[2:] {
		if v != 1000+i+2 {
			t.Fatalf("item %d is %d, want %d: positions out of order", i+2, v, 1000+i+2)
		}
	}
	if n := l.Len(); n != 52 {
		t.Fatalf("Len = %d, want 52", n)
	}

	t0 := time.Now()
	if v, ok := l.TryWait(0, 100*time.Millisecond, func(v int) bool { return v < 0 }); ok {
		t.Fatalf("TryWait found %d, want nothing", v)
	}
	if d := time.Since(t0); d < 100*time.Millisecond {
		t.Fatalf("TryWait gave up after %v, before its deadline", d)
	}
	// From a later position, an earlier match is not seen.
	if _, ok := l.TryWait(2, 50*time.Millisecond, func(v int) bool { return v == 42 }); ok {
		t.Fatal("TryWait from position 2 found the item at position 1")
	}
}
