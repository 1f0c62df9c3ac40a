package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/postgres"
)

// TestLeaseChangesWakeFollower checks the lease change feed: renewals are
// silent, and a released lease wakes a follower in lease mode, which takes
// over long before its next poll would have.
func TestLeaseChangesWakeFollower(t *testing.T) {
	s, prefix := newStoreWithPrefix(t)
	ctx := t.Context()
	feed, err := postgres.ListenLeases(ctx, databaseURL(t), prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	select { // the signal after LISTEN took effect
	case <-feed:
	case <-time.After(5 * time.Second):
		t.Fatal("no signal after connecting")
	}

	l, err := s.Acquire(ctx, "feed", "x", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waitSignal(t, feed, "an acquire")
	for range 3 {
		if l, err = s.Renew(ctx, l.Token(), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-feed:
		t.Fatal("a renewal sent a notification")
	case <-time.After(300 * time.Millisecond):
	}
	if err := s.Release(ctx, l.Token()); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, feed, "a release")

	// Two electors in lease mode polling every 10 s: the follower hears the
	// leader's release and acquires at once.
	const poll = 10 * time.Second
	start := func(holder string, changes <-chan struct{}) (*election.Elector, context.CancelFunc, chan struct{}) {
		e, err := election.New(election.Config{Store: s, LeaseName: "wake", HolderID: holder, Changes: changes,
			LeaseDuration: time.Minute, RenewInterval: 5 * time.Second, AcquireInterval: poll})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = e.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return e, cancel, done
	}
	a, stopA, doneA := start("a", nil)
	waitUntil(t, 5*time.Second, func() bool { return a.IsLeader() })
	bFeed, err := postgres.ListenLeases(ctx, databaseURL(t), prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _, _ := start("b", bFeed)
	time.Sleep(200 * time.Millisecond) // b has polled once and waits
	stopped := time.Now()
	stopA()
	<-doneA
	waitUntil(t, poll/2, func() bool { return b.IsLeader() })
	t.Logf("lease mode, graceful handoff woken by the feed: %s (poll interval %s)", time.Since(stopped), poll)
}

func waitSignal(t *testing.T, feed <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-feed:
	case <-time.After(5 * time.Second):
		t.Fatalf("no notification after %s", what)
	}
}
