package mysql_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/storetest"
)

// A term acquired without the lock that renews through its session once
// the lock is granted sets the session's idle limit from the lease, as a
// takeover does: a session silent for a lease + 1 s is ended by the server
// (and its lock freed), not after the 10 s a session has before that.
func TestSessionRenewSetsIdleLimit(t *testing.T) {
	s, locker, _ := database.Advisory(newLocker)(t)
	ctx := t.Context()
	l, err := s.Acquire(ctx, "idle", "h", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sess := storetest.LockedSession(t, locker, "idle")
	if _, err := sess.Renew(ctx, l.Token(), time.Second); err != nil {
		t.Fatalf("renew through the session: %v", err)
	}
	time.Sleep(3500 * time.Millisecond) // idle limit 1 s + 1 s
	if _, err := sess.Renew(ctx, l.Token(), time.Second); !errors.Is(err, sqlease.ErrSessionLost) {
		t.Fatalf("renew after the session sat idle past lease + 1 s: %v, want ErrSessionLost (the server ends it)", err)
	}
}
