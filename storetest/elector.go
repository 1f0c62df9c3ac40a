package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
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

// NextTerm waits up to d for one of electors to lead in a term newer than
// old, the term prev held until the fault of since (what names it, for the
// log), and returns the new term's token. The new epoch must be old's + 1
// and prev's gate must refuse old.
func NextTerm(t *testing.T, d time.Duration, since time.Time, what string, prev *election.Elector, old sqlease.Token, electors ...*election.Elector) sqlease.Token {
	t.Helper()
	var next sqlease.Token
	waitCond(t, d, "a leader after "+what, func() bool {
		for _, e := range electors {
			if tok, err := e.Require(context.Background()); err == nil && tok.Epoch > old.Epoch {
				next = tok
				return true
			}
		}
		return false
	})
	t.Logf("%s leads %s after %s", next.Holder, time.Since(since), what)
	if next.Epoch != old.Epoch+1 {
		t.Fatalf("epochs %d -> %d", old.Epoch, next.Epoch)
	}
	if err := prev.Ensure(old); !errors.Is(err, sqlease.ErrNotLeader) {
		t.Fatalf("%s's old token passed the gate: %v", old.Holder, err)
	}
	return next
}
