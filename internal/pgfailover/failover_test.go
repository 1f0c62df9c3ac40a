package pgfailover

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/internal/pgtest"
	"github.com/sqlease/sqlease/postgres"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The electors' timing: short, so that the whole test takes seconds.
const (
	nodes         = 4
	leaseDuration = 1500 * time.Millisecond
	renewInterval = 500 * time.Millisecond
	acquireEvery  = 50 * time.Millisecond
)

// term is one term as its elector told it: OnStartedLeading's token, when
// its callback began, and until when it may have acted — the callback's
// return, or for a term lost rather than resigned, its local deadline
// (ActUntil) if later.
type term struct {
	node       int
	tok        sqlease.Token
	start, end time.Time
	resigned   bool
}

// ledger records every term of every elector.
type ledger struct {
	mu    sync.Mutex
	terms []term
	began chan struct{} // a term began
}

func (l *ledger) add(t term) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.terms = append(l.terms, t)
	select {
	case l.began <- struct{}{}:
	default:
	}
	return len(l.terms) - 1
}

func (l *ledger) end(i int, at time.Time, resigned bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.terms[i].end, l.terms[i].resigned = at, resigned
}

// since counts the terms that began after t.
func (l *ledger) since(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, x := range l.terms {
		if x.start.After(t) {
			n++
		}
	}
	return n
}

func (l *ledger) snapshot() []term {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]term(nil), l.terms...)
}

// TestAsyncFailover: see the package documentation. In advisory mode
// leadership passes through the session lock (a takeover), which honours
// the hold-off as an acquire does.
func TestAsyncFailover(t *testing.T) {
	t.Run("lease", func(t *testing.T) { testAsyncFailover(t, false) })
	t.Run("advisory", func(t *testing.T) { testAsyncFailover(t, true) })
}

func testAsyncFailover(t *testing.T, advisory bool) {
	begin := time.Now()
	primary := pgtest.Start(t)
	replica := primary.StartReplica(t)
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		primary.Port(), replica.Port())
	ctx := t.Context()

	var l ledger
	l.began = make(chan struct{}, 1)
	var churn atomic.Bool // leaders resign after a short while
	churn.Store(true)

	var wg sync.WaitGroup
	runCtx, stop := context.WithCancel(context.Background())
	defer func() { stop(); wg.Wait() }()
	migrated, err := postgres.OpenStore(ctx, dsn, "sqlease")
	if err != nil {
		t.Fatal(err)
	}
	migrated.DB().Close()
	t.Logf("migrated at +%v", time.Since(begin).Round(time.Millisecond))
	for i := range nodes {
		db, err := postgres.Open(dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		s, err := postgres.New(db, "sqlease")
		if err != nil {
			t.Fatal(err)
		}
		var locker sqlease.SessionLocker
		if advisory {
			if locker, err = postgres.NewLocker(postgres.AdvisoryConfig{DSN: dsn, Prefix: "sqlease"}); err != nil {
				t.Fatal(err)
			}
		}
		var e *election.Elector
		e, err = election.New(election.Config{
			Store: s, SessionLocker: locker, HolderID: fmt.Sprintf("node-%d", i),
			LeaseDuration: leaseDuration, RenewInterval: renewInterval,
			AcquireInterval: acquireEvery, AcquireJitter: -1, ResignHoldoff: 100 * time.Millisecond,
			OnStartedLeading: func(ctx context.Context, tok sqlease.Token) {
				k := l.add(term{node: i, tok: tok, start: time.Now()})
				resigned := false
				hold := time.NewTimer(time.Duration(60+rand.IntN(140)) * time.Millisecond)
				defer hold.Stop()
				select {
				case <-ctx.Done():
				case <-hold.C:
					if churn.Load() {
						resigned = true
						e.Resign(tok, "churn")
					}
					<-ctx.Done()
				}
				end := time.Now()
				if until, ok := e.ActUntil(tok); ok && !resigned && until.After(end) {
					end = until // lost: it may act until its local deadline
				}
				l.end(k, end, resigned)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Run(runCtx) }()
	}

	waitFor := func(what string, d time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.After(d)
		for !ok() {
			select {
			case <-l.began:
			case <-time.After(10 * time.Millisecond):
			case <-deadline:
				t.Fatalf("timed out after %v waiting for %s", d, what)
			}
		}
	}

	// Churn on the healthy pair, then cut the replication.
	waitFor("three terms", 10*time.Second, func() bool { return l.since(begin) >= 3 })
	replica.WaitReplayed(t, primary)
	cutAt := time.Now()
	replica.CutReplication(t)
	// The primary alone hands out terms, which the replica never gets, for
	// longer than a lease, so that the lease the replica knows has expired
	// by the promotion: nothing delays the first acquire on it.
	waitFor("terms on the primary alone", 10*time.Second, func() bool {
		return time.Since(cutAt) > leaseDuration+100*time.Millisecond && l.since(cutAt) >= 3
	})
	// Kill the primary right after a term began there (churn stops before
	// its holder resigns): it trusts its lease up to its local deadline, and
	// only the dead primary knows of it.
	mark := time.Now()
	waitFor("a fresh term", 10*time.Second, func() bool {
		if l.since(mark) == 0 {
			return false
		}
		churn.Store(false)
		return true
	})
	killAt := time.Now()
	primary.Kill(t)
	tl := replica.Promote(t)
	promotedAt := time.Now()
	churn.Store(true)
	t.Logf("cut at +%v, %d terms on the primary alone, killed at +%v, promoted at +%v to timeline %d",
		cutAt.Sub(begin), l.since(cutAt), killAt.Sub(begin), promotedAt.Sub(begin), tl)

	waitFor("terms after the failover", 15*time.Second, func() bool { return l.since(promotedAt) >= 2 })
	stop()
	wg.Wait()

	terms := l.snapshot()
	sort.Slice(terms, func(i, j int) bool { return terms[i].start.Before(terms[j].start) })
	var maxBefore, firstAfter int64
	var firstAfterAt time.Time
	byEpoch := map[int64]term{}
	for _, x := range terms {
		t.Logf("node %d epoch %#x (%d) from +%v to +%v resigned=%v", x.node, x.tok.Epoch, x.tok.Epoch,
			x.start.Sub(begin).Round(time.Millisecond), x.end.Sub(begin).Round(time.Millisecond), x.resigned)
		if o, dup := byEpoch[x.tok.Epoch]; dup {
			t.Errorf("epoch %d told twice: to node %d at +%v and to node %d at +%v", x.tok.Epoch,
				o.node, o.start.Sub(begin), x.node, x.start.Sub(begin))
		}
		byEpoch[x.tok.Epoch] = x
		if x.start.Before(killAt) {
			maxBefore = max(maxBefore, x.tok.Epoch)
		} else if firstAfter == 0 {
			firstAfter, firstAfterAt = x.tok.Epoch, x.start
		}
	}
	if firstAfter <= maxBefore {
		t.Errorf("the first epoch after the failover, %d, is not above every epoch told before it (up to %d)", firstAfter, maxBefore)
	}
	t.Logf("first term after the failover: epoch %#x at +%v, %v after the promotion", firstAfter,
		firstAfterAt.Sub(begin).Round(time.Millisecond), firstAfterAt.Sub(promotedAt).Round(time.Millisecond))
	for i, a := range terms {
		for _, b := range terms[i+1:] {
			if b.start.Before(a.end) {
				t.Errorf("two terms acted at once: node %d (epoch %d, +%v to +%v) and node %d (epoch %d, from +%v)",
					a.node, a.tok.Epoch, a.start.Sub(begin), a.end.Sub(begin), b.node, b.tok.Epoch, b.start.Sub(begin))
			}
		}
	}
	t.Logf("%d terms in %v", len(terms), time.Since(begin).Round(time.Millisecond))
}
