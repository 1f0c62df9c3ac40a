package storetest

import (
	"context"
	"sync"
	"testing"

	"github.com/sqlease/sqlease/election"
)

// RunElector builds an elector from cfg and runs it until stop is called or
// the test ends; stop cancels the run and waits for Run to return (a
// graceful resign), and may be called more than once. Run returning an
// error fails the test.
func RunElector(t testing.TB, cfg election.Config) (e *election.Elector, stop func()) {
	t.Helper()
	e, err := election.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := e.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return e, stop
}
