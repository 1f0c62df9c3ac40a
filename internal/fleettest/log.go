package fleettest

import (
	"slices"
	"sync"
	"time"
)

// Log is an append-only list that goroutines wait on: a fleet's events, a
// node's log lines, the requests an action endpoint received. Its zero value
// is empty and ready; it is safe for concurrent use.
type Log[T any] struct {
	mu     sync.Mutex
	items  []T
	notify chan struct{} // closed and replaced on every Add; nil until waited on
}

// Add appends the item that make returns for its position, under the log's
// lock (so positions are unique and in order).
func (l *Log[T]) Add(make func(index int) T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.items = append(l.items, make(len(l.items)))
	if l.notify != nil {
		close(l.notify)
		l.notify = nil
	}
}

// Len returns the number of items so far: the position of the next one.
func (l *Log[T]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.items)
}

// All returns a copy of the items so far.
func (l *Log[T]) All() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.items)
}

// TryWait waits up to timeout for an item at position from or later that
// matches pred, and returns the first one as soon as it is there.
func (l *Log[T]) TryWait(from int, timeout time.Duration, pred func(T) bool) (T, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		for ; from < len(l.items); from++ {
			if pred(l.items[from]) {
				v := l.items[from]
				l.mu.Unlock()
				return v, true
			}
		}
		if l.notify == nil {
			l.notify = make(chan struct{})
		}
		ch := l.notify
		l.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			var zero T
			return zero, false
		}
	}
}
