package postgres_test

import (
	"testing"
	"time"

	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/storetest"
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
	start := func(holder string, changes <-chan struct{}) (*election.Elector, func()) {
		return storetest.RunElector(t, election.Config{Store: s, LeaseName: "wake", HolderID: holder, Changes: changes,
			LeaseDuration: time.Minute, RenewInterval: 5 * time.Second, AcquireInterval: poll})
	}
	a, stopA := start("a", nil)
	dbtest.WaitFor(t, 5*time.Second, "a to lead", a.IsLeader)
	bFeed, err := postgres.ListenLeases(ctx, databaseURL(t), prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := start("b", bFeed)
	time.Sleep(200 * time.Millisecond) // b has polled once and waits
	stopped := time.Now()
	stopA()
	dbtest.WaitFor(t, poll/2, "b to lead, woken by the feed", b.IsLeader)
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

// TestLeaseFeedByName checks the per-lease feed: a change of one lease wakes
// its subscribers and no one else's, and an ended subscription hears
// nothing.
func TestLeaseFeedByName(t *testing.T) {
	s, prefix := newStoreWithPrefix(t)
	ctx := t.Context()
	feed, err := postgres.ListenLeaseFeed(ctx, databaseURL(t), prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := feed.Subscribe("singleton:a")
	a2, stopA2 := feed.Subscribe("singleton:a")
	b, _ := feed.Subscribe("singleton:b")
	for _, ch := range []<-chan struct{}{a, a2, b} {
		waitSignal(t, ch, "subscribing") // a subscriber may have missed changes
	}
	time.Sleep(300 * time.Millisecond) // the signal after LISTEN took effect, if it came late
	for _, ch := range []<-chan struct{}{a, a2, b} {
		select {
		case <-ch:
		default:
		}
	}
	stopA2()

	l, err := s.Acquire(ctx, "singleton:a", "x", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waitSignal(t, a, "acquiring lease a")
	select {
	case <-b:
		t.Fatal("a change of lease a woke the subscriber of lease b")
	case <-a2:
		t.Fatal("an ended subscription was woken")
	case <-time.After(300 * time.Millisecond):
	}
	if err := s.Release(ctx, l.Token()); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, a, "releasing lease a")
	if _, err := s.Acquire(ctx, "singleton:b", "x", time.Minute); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, b, "acquiring lease b")
}
