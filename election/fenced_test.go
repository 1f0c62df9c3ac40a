package election_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/storetest"
)

// TestFnErrorKeepsLeadership: an error of the fenced function itself — here
// a job lock lost inside it, which wraps ErrLeaseLost as the scheduler's run
// writes do — is returned as is and leaves the gate open, the leading
// context alive and the epoch unchanged. Only a failed fence
// (ErrFenceFailed) drops leadership.
func TestFnErrorKeepsLeadership(t *testing.T) {
	s := dbtest.SQLite(t)
	leadCtx := make(chan context.Context, 1)
	cfg := fast(s, "a")
	cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin = 10*time.Second, 3*time.Second, time.Second
	cfg.OnStartedLeading = func(ctx context.Context, tok sqlease.Token) { leadCtx <- ctx; <-ctx.Done() }
	e, _ := storetest.RunElector(t, cfg)
	dbtest.WaitFor(t, 5*time.Second, "leadership", e.IsLeader)
	tok, _ := e.Require(context.Background())
	ctx := <-leadCtx

	errLock := fmt.Errorf("finish run: job lock 7/a@3: %w", sqlease.ErrLeaseLost)
	err := e.Fenced(context.Background(), tok, func(*sql.Tx) error { return errLock })
	if !errors.Is(err, errLock) || errors.Is(err, sqlease.ErrFenceFailed) {
		t.Fatalf("Fenced whose fn lost a job lock = %v, want fn's error and not ErrFenceFailed", err)
	}
	if got, err := e.Require(context.Background()); err != nil || got != tok {
		t.Fatalf("after fn's own ErrLeaseLost the gate says (%v, %v), want %v still leading", got, err, tok)
	}
	select {
	case <-ctx.Done():
		t.Fatal("fn's own ErrLeaseLost cancelled the leading context")
	case <-time.After(100 * time.Millisecond):
	}
	if err := e.Fenced(context.Background(), tok, func(*sql.Tx) error { return nil }); err != nil {
		t.Fatalf("the next fenced write under the same token: %v", err)
	}
}
