package history_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/history"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/sqlstore"
	"github.com/sqlease/sqlease/storetest"
)

// TestStore: rows come back newest first per lease, a page continues below
// its cursor, times are the database clock minus the queue wait, and
// retention deletes only old rows.
func TestStore(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, open dbtest.Open) {
		s := open(t)
		ctx := t.Context()
		before, err := s.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 5; i++ {
			ev := sqlstore.EventAcquired
			if i%2 == 0 {
				ev = sqlstore.EventReleased
			}
			if err := s.RecordLeaseEvent(ctx, sqlstore.LeaseEvent{Lease: "lead", Event: ev, Holder: "node-a", Epoch: int64(i), Reason: "r" + string(rune('0'+i))}, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.RecordLeaseEvent(ctx, sqlstore.LeaseEvent{Lease: "other", Event: sqlstore.EventLost, Holder: "node-b", Epoch: 9}, time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := s.RecordLeaseEvent(ctx, sqlstore.LeaseEvent{Lease: "lead", Event: "elected", Holder: "x", Epoch: 1}, 0); err == nil {
			t.Error("an unknown event was recorded")
		}
		after, _ := s.Now(ctx)
		page, err := s.LeaseHistory(ctx, "lead", 0, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != 3 || page[0].Epoch != 5 || page[1].Epoch != 4 || page[2].Epoch != 3 {
			t.Fatalf("first page: %+v", page)
		}
		if page[1].Event != sqlstore.EventReleased || page[1].Holder != "node-a" || page[1].Reason != "r4" {
			t.Errorf("row: %+v", page[1])
		}
		if page[0].At.Before(before.Add(-time.Millisecond)) || page[0].At.After(after.Add(time.Millisecond)) {
			t.Errorf("at %v is not between %v and %v", page[0].At, before, after)
		}
		rest, err := s.LeaseHistory(ctx, "lead", page[2].ID, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(rest) != 2 || rest[0].Epoch != 2 || rest[1].Epoch != 1 {
			t.Fatalf("second page: %+v", rest)
		}
		other, err := s.LeaseHistory(ctx, "other", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(other) != 1 || other[0].At.After(before.Add(-59*time.Minute)) {
			t.Fatalf("an event an hour old: %+v (now %v)", other, before)
		}
		n, err := s.PruneLeaseHistory(ctx, 30*time.Minute)
		if err != nil || n != 1 {
			t.Fatalf("prune: %d, %v", n, err)
		}
		if all, _ := s.LeaseHistory(ctx, "lead", 0, 100); len(all) != 5 {
			t.Errorf("prune deleted recent rows: %d left", len(all))
		}
	})
}

// TestRecorder runs real electors on each database: a term released on
// shutdown, the next acquired after it, and a takeover of a lease whose
// holder vanished without a release (what kill -9 leaves behind).
func TestRecorder(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, open dbtest.Open) {
		s := open(t)
		ctx := t.Context()
		var logs bytes.Buffer
		var mu sync.Mutex
		log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelWarn}))

		// A dead predecessor: a term recorded as acquired whose lease
		// expires without a release.
		l, err := s.Acquire(ctx, "lead", "ghost", 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RecordLeaseEvent(ctx, sqlstore.LeaseEvent{Lease: "lead", Event: sqlstore.EventAcquired, Holder: "ghost", Epoch: l.Epoch}, 0); err != nil {
			t.Fatal(err)
		}
		term := func(holder string) {
			rec, err := history.New(history.Config{Store: s, Holder: holder, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			rctx, stopRec := context.WithCancel(ctx)
			recDone := make(chan struct{})
			go func() { defer close(recDone); _ = rec.Run(rctx) }()
			el, stop := storetest.RunElector(t, election.Config{Store: s, LeaseName: "lead", HolderID: holder,
				LeaseDuration: time.Second, RenewInterval: 200 * time.Millisecond, AcquireInterval: 50 * time.Millisecond,
				Observer: rec, Logger: rec.Logger(log)})
			dbtest.WaitFor(t, 10*time.Second, holder+" to lead", el.IsLeader)
			stop()
			stopRec()
			<-recDone
		}
		term("node-a")
		term("node-b")
		got, err := s.LeaseHistory(ctx, "lead", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		want := []struct {
			event, holder string
			epoch         int64
			reason        string
		}{
			{sqlstore.EventReleased, "node-b", 3, "shutdown"},
			{sqlstore.EventAcquired, "node-b", 3, "node-a released epoch 2"},
			{sqlstore.EventReleased, "node-a", 2, "shutdown"},
			{sqlstore.EventTakenOver, "node-a", 2, "the lease of ghost (epoch 1) expired without a release"},
			{sqlstore.EventAcquired, "ghost", 1, ""},
		}
		if len(got) != len(want) {
			t.Fatalf("history: %+v", got)
		}
		for i, w := range want {
			g := got[i]
			if g.Event != w.event || g.Holder != w.holder || g.Epoch != w.epoch || g.Reason != w.reason {
				t.Errorf("event %d: got %s %s %d %q, want %s %s %d %q", i, g.Event, g.Holder, g.Epoch, g.Reason, w.event, w.holder, w.epoch, w.reason)
			}
		}
		// An event's time is the database's now less how long ago it
		// happened, both in whole milliseconds (SQLite's clock), so
		// two events a millisecond or two apart (a term taken over,
		// then released at once) may swap by that much; the order is
		// the ids'.
		const resolution = 2 * time.Millisecond
		for i := 1; i < len(got); i++ {
			if got[i].At.After(got[i-1].At.Add(resolution)) {
				t.Errorf("event %d at %v is after the newer %v", i, got[i].At, got[i-1].At)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(logs.String(), "leader_released") {
			t.Errorf("Info records reached a Warn-level log: %s", logs.String())
		}
	})
}

// TestNeverBlocks: a full queue drops events instead of blocking the
// elector, and says so.
func TestNeverBlocks(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	s := dbtest.SQLite(t)
	rec, err := history.New(history.Config{Store: s, Holder: "a", Queue: 2, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 100 {
			rec.LeadershipChanged("lead", i%2 == 0, int64(i/2+1))
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("LeadershipChanged blocked without a writer running")
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "lease_history_dropped") {
		t.Errorf("no lease_history_dropped warning: %s", logs.String())
	}
	var _ sqlease.Observer = rec
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestPresence: a node's presence lease is taken at once, renewed while it
// runs (a short ttl outlived several times) and released when it stops.
func TestPresence(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, open dbtest.Open) {
		s := open(t)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			// A renewal every 100 ms for a ttl of 1 s: ten chances
			// per ttl, so that a loaded machine's stall of a few
			// hundred milliseconds does not let it expire.
			history.Presence(ctx, s, "node-p", 100*time.Millisecond, time.Second, nil)
		}()
		lease := func() sqlease.Lease {
			l, err := s.Lease(t.Context(), sqlstore.NodeLeasePrefix+"node-p")
			if err != nil {
				return sqlease.Lease{}
			}
			return l
		}
		deadline := time.Now().Add(3 * time.Second)
		for lease().Holder != "node-p" || lease().Expired() {
			if time.Now().After(deadline) {
				t.Fatalf("no live presence lease: %+v", lease())
			}
			time.Sleep(10 * time.Millisecond)
		}
		first := lease()
		time.Sleep(2100 * time.Millisecond) // two ttls
		if l := lease(); l.Expired() || l.Epoch != first.Epoch || !l.RenewedAt.After(first.RenewedAt) {
			t.Fatalf("presence not renewed: %+v, then %+v", first, l)
		}
		cancel()
		<-done
		if l := lease(); !l.Expired() {
			t.Fatalf("presence not released at stop: %+v", l)
		}
	})
}

// countingRecorder counts the status records written.
type countingRecorder struct {
	*sqlstore.Store
	mu sync.Mutex
	n  int
}

func (c *countingRecorder) RecordLeaseEvent(ctx context.Context, e sqlstore.LeaseEvent, ago time.Duration) error {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.Store.RecordLeaseEvent(ctx, e, ago)
}

func (c *countingRecorder) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestPresenceStatus: the status record is written when the presence is
// taken and then only when the status changes — the renewal-driven fields
// (lease_expires_at) do not count — so an idle node writes nothing more;
// the newest record is the node's current status, with its version.
func TestPresenceStatus(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, open dbtest.Open) {
		s := open(t)
		ctx, cancel := context.WithCancel(t.Context())
		var mu sync.Mutex
		ready, tick := true, 0
		status := func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			tick++
			line := "mode=follower holder_id=node-s lease_expires_at=2026-01-01T00:00:0" + string(rune('0'+tick%10)) + "Z"
			if !ready {
				line += " reason=singleton_stale singleton_stale=ingest"
			}
			return ready, line
		}
		rec := &countingRecorder{Store: s}
		done := make(chan struct{})
		go func() {
			defer close(done)
			history.RunPresence(ctx, history.PresenceConfig{Store: s, Holder: "node-s", Every: time.Second, TTL: 3 * time.Second,
				Status: status, Version: "v1.2.3 (commit x)", Recorder: rec, StatusCheck: 20 * time.Millisecond})
		}()
		newest := func() string {
			es, err := s.LeaseHistory(t.Context(), sqlstore.NodeLeasePrefix+"node-s", 0, 1)
			if err != nil || len(es) == 0 {
				return ""
			}
			return es[0].Event + " " + es[0].Reason
		}
		waitFor := func(want string) {
			t.Helper()
			for deadline := time.Now().Add(3 * time.Second); newest() != want; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("newest status %q, want %q", newest(), want)
				}
			}
		}
		waitFor("status ready=true mode=follower holder_id=node-s version=v1.2.3_(commit_x)")
		time.Sleep(300 * time.Millisecond) // 15 checks, the expiry changing every time
		if n := rec.count(); n != 1 {
			t.Fatalf("%d status records for one unchanged status", n)
		}
		mu.Lock()
		ready = false
		mu.Unlock()
		waitFor("status ready=false mode=follower holder_id=node-s reason=singleton_stale singleton_stale=ingest version=v1.2.3_(commit_x)")
		time.Sleep(200 * time.Millisecond)
		if n := rec.count(); n != 2 {
			t.Fatalf("%d status records for two statuses", n)
		}
		cancel()
		<-done
	})
}
