package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestSessionRequestBeforeWatcherReads: startWatching marks the session
// watched and starts the watcher, which may not have run yet when a
// request comes (a loaded machine: CI saw a node panic so, in do's retry
// tick, on the interrupt the watcher had not set yet). The request waits,
// with no panic, until the watcher serves it.
func TestSessionRequestBeforeWatcherReads(t *testing.T) {
	s := &session{lost: make(chan struct{}), closed: make(chan struct{}), reqs: make(chan func(*pgx.Conn), 1),
		done: make(chan struct{}), watching: true} // the watcher has not set s.interrupt yet
	served := make(chan error, 1)
	go func() {
		served <- s.do(context.Background(), func(*pgx.Conn) error { return nil })
	}()
	// Several of do's 5 ms ticks pass before the watcher comes.
	time.Sleep(50 * time.Millisecond)
	select {
	case fn := <-s.reqs:
		fn(nil)
	case <-time.After(10 * time.Second):
		t.Fatal("the request was never queued")
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("do: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("do did not return once the request was served")
	}
}
