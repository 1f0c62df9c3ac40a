package httpapi_test

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlite"
	"github.com/sqlease/sqlease/sqlstore"
)

// probeNode is a node for readiness tests: a real SQLite store, an elector
// whose term drives scheduler.Lead, and the API with LeaderDispatch.
type probeNode struct {
	t     *testing.T
	store *sqlstore.Store
	sched *scheduler.Scheduler
	el    *election.Elector
	srv   *httptest.Server
	run   func() // starts the elector
}

func newProbeNode(t *testing.T, store *sqlstore.Store, clock sqlease.Clock, dispatchLimit time.Duration) *probeNode {
	t.Helper()
	n := &probeNode{t: t, store: store}
	var err error
	n.sched, err = scheduler.New(scheduler.Config{Store: store, Holder: "a", Handler: func(context.Context, sqlease.Run) error { return nil },
		RefreshInterval: 50 * time.Millisecond, DispatchFailureLimit: dispatchLimit})
	if err != nil {
		t.Fatal(err)
	}
	n.el, err = election.New(election.Config{Store: store, LeaseName: "lead", HolderID: "a",
		LeaseDuration: 2 * time.Second, RenewInterval: 200 * time.Millisecond, AcquireInterval: 50 * time.Millisecond,
		ResignHoldoff: time.Minute, Clock: clock,
		OnStartedLeading: func(ctx context.Context, tok sqlease.Token) { _ = n.sched.Lead(ctx, n.el, tok) }})
	if err != nil {
		t.Fatal(err)
	}
	n.srv = httptest.NewServer(httpapi.New(httpapi.Config{Scheduler: n.sched, Leases: store, Elector: n.el,
		LeaderDispatch: true, DBUnreachableAfter: 10 * time.Second}))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	n.run = func() { wg.Add(1); go func() { defer wg.Done(); _ = n.el.Run(ctx) }() }
	t.Cleanup(func() { n.srv.Close(); cancel(); wg.Wait() })
	return n
}

func (n *probeNode) readyz() (int, map[string]string) {
	n.t.Helper()
	res, err := http.Get(n.srv.URL + "/readyz")
	if err != nil {
		n.t.Fatal(err)
	}
	defer res.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		k, err := res.Body.Read(buf)
		b.Write(buf[:k])
		if err != nil {
			break
		}
	}
	return res.StatusCode, readyFields(n.t, []byte(b.String()))
}

// A leader whose dispatcher cannot run is not ready and never says
// mode=leader; once it resigned, it is a ready follower.
func TestReadyzLeaderWithoutDispatcher(t *testing.T) {
	store := dbtest.SQLite(t)
	if _, err := store.DB().Exec("ALTER TABLE sqlease_jobs RENAME TO sqlease_jobs_away"); err != nil {
		t.Fatal(err)
	}
	n := newProbeNode(t, store, nil, 1500*time.Millisecond)
	n.run()
	dbtest.WaitFor(t, 5*time.Second, "leadership", n.el.IsLeader)
	var sawFailing bool
	dbtest.WaitFor(t, 10*time.Second, "the node to resign and follow", func() bool {
		status, f := n.readyz()
		if f["mode"] == "leader" {
			t.Fatalf("mode=leader while the dispatcher cannot build its schedule (dispatch %+v)", n.sched.Dispatch())
		}
		if f["reason"] == "dispatch_failing" {
			if status != http.StatusServiceUnavailable || !strings.Contains(f["dispatch_error"], "sqlease_jobs") {
				t.Fatalf("dispatch_failing answered %d, dispatch_error %q", status, f["dispatch_error"])
			}
			sawFailing = true
		}
		return status == http.StatusOK && f["mode"] == "follower"
	})
	if !sawFailing {
		t.Fatal("readyz never said dispatch_failing")
	}
	if n.el.IsLeader() {
		t.Fatal("still leading after resigning")
	}
}

// Readiness does not depend on how often the node happens to query (an
// advisory follower waiting on its session lock sends nothing): past half
// the bound, /readyz probes the database itself.
func TestReadyzProbesAQuietNode(t *testing.T) {
	clock := &offsetClock{}
	n := newProbeNode(t, dbtest.SQLite(t), clock, time.Second) // the elector never runs: no traffic of its own
	if status, f := n.readyz(); status != http.StatusOK || f["mode"] != "follower" {
		t.Fatalf("first probe: %d %v", status, f)
	}
	clock.Advance(30 * time.Second)
	if status, f := n.readyz(); status != http.StatusOK || f["mode"] != "follower" {
		t.Fatalf("a quiet node with a working database: %d %v", status, f)
	}
	n.store.DB().Close()
	clock.Advance(30 * time.Second)
	if status, f := n.readyz(); status != http.StatusServiceUnavailable || f["reason"] != "db_unreachable" {
		t.Fatalf("a quiet node whose database is gone: %d %v", status, f)
	}
}

// A node that can read its database but not write it says so, and
// recovers by itself once it can write again.
func TestReadyzDatabaseNotWritable(t *testing.T) {
	path := dbPath(t)
	if s, err := sqlite.OpenStore(context.Background(), path, "sqlease"); err != nil {
		t.Fatal(err)
	} else {
		s.DB().Close()
	}
	db, err := sql.Open("sqlite", sqlite.DSN(path, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1) // one connection: the pragma below holds for every statement
	t.Cleanup(func() { db.Close() })
	d, err := sqlite.Dialect("sqlease")
	if err != nil {
		t.Fatal(err)
	}
	store := sqlstore.New(db, d)
	if _, err := db.Exec("PRAGMA query_only = ON"); err != nil { // as a read-only file or a full disk
		t.Fatal(err)
	}
	n := newProbeNode(t, store, nil, time.Second)
	n.run()
	dbtest.WaitFor(t, 5*time.Second, "readyz to report the write failure", func() bool {
		status, f := n.readyz()
		return status == http.StatusServiceUnavailable && f["reason"] == "db_write_failed" && f["db_error"] != ""
	})
	if _, err := db.Exec("PRAGMA query_only = OFF"); err != nil {
		t.Fatal(err)
	}
	dbtest.WaitFor(t, 5*time.Second, "recovery", func() bool {
		status, f := n.readyz()
		return status == http.StatusOK && f["mode"] == "leader"
	})
}
