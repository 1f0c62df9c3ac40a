package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// testRevokedSessions: a revoked dashboard session reads as revoked until
// its revocation expires in database time, then no longer and is pruned;
// revoking twice is no error; other ids are not revoked.
func testRevokedSessions(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	if err := s.RevokeSession(ctx, "long-0123456789abcdef", time.Hour); err != nil {
		t.Fatalf("RevokeSession: %v", err)
	}
	if err := s.RevokeSession(ctx, "long-0123456789abcdef", time.Hour); err != nil {
		t.Fatalf("RevokeSession twice: %v", err)
	}
	if err := s.RevokeSession(ctx, "short", shortTTL); err != nil {
		t.Fatalf("RevokeSession: %v", err)
	}
	for _, c := range []struct {
		id   string
		want bool
	}{{"long-0123456789abcdef", true}, {"short", true}, {"other", false}, {"LONG-0123456789ABCDEF", false}, {"", false}} {
		if got, err := s.SessionRevoked(ctx, c.id); err != nil || got != c.want {
			t.Errorf("SessionRevoked(%q) = %v, %v; want %v", c.id, got, err, c.want)
		}
	}
	for _, bad := range []string{"", string(make([]byte, sqlstore.MaxSessionID+1))} {
		if err := s.RevokeSession(ctx, bad, time.Hour); !errors.Is(err, sqlease.ErrInvalidConfig) {
			t.Errorf("RevokeSession(%d bytes) = %v, want ErrInvalidConfig", len(bad), err)
		}
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		revoked, err := s.SessionRevoked(ctx, "short")
		if err != nil {
			t.Fatal(err)
		}
		if !revoked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a revocation of 300 ms still holds after 15 s")
		}
		time.Sleep(pollEvery)
	}
	n, err := s.PruneRevokedSessions(ctx)
	if err != nil || n != 1 {
		t.Errorf("PruneRevokedSessions = %d, %v; want 1 (the expired one)", n, err)
	}
	if got, err := s.SessionRevoked(ctx, "long-0123456789abcdef"); err != nil || !got {
		t.Errorf("after pruning, the unexpired revocation reads %v, %v", got, err)
	}
}
