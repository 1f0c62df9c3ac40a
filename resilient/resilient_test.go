package resilient_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/resilient"
	"github.com/sqlease/sqlease/sqlstore"
	"github.com/sqlease/sqlease/storetest"
)

// proxied returns a store whose connections go through an in-process
// toxiproxy in front of a fresh database, and the proxy.
func proxied(t *testing.T) (*sqlstore.Store, *toxiproxy.Proxy) {
	t.Helper()
	dbURL := dbtest.PostgresURL(t)
	host := dbURL[strings.Index(dbURL, "@")+1:]
	upstream := host[:strings.Index(host, "/")]

	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	// A port no outgoing connection can take while the proxy is down.
	proxy := toxiproxy.NewProxy(srv, "pg", fleettest.QuietAddr(t), upstream)
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Stop)
	via := strings.Replace(dbURL, upstream, proxy.Listen, 1)
	s, err := postgres.OpenStore(t.Context(), via, "sqlease")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.DB().Close() })
	return s, proxy
}

// cut drops every connection through the proxy and refuses new ones for d,
// then listens again on the same address.
func cut(t *testing.T, p *toxiproxy.Proxy, d time.Duration) {
	t.Helper()
	addr := p.Listen
	p.Stop()
	time.Sleep(d)
	p.Listen = addr
	for i := 0; ; i++ {
		if err := p.Start(); err == nil {
			return
		} else if i > 100 {
			t.Fatalf("restart proxy: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func leader(t *testing.T, store sqlease.LeaseStore) (*election.Elector, *atomic.Int32) {
	t.Helper()
	var terms atomic.Int32
	e, _ := storetest.RunElector(t, election.Config{Store: store, HolderID: "a",
		LeaseDuration: 3 * time.Second, RenewInterval: 200 * time.Millisecond, AcquireInterval: 50 * time.Millisecond,
		SafetyMargin:     500 * time.Millisecond,
		OnStartedLeading: func(ctx context.Context, tok sqlease.Token) { terms.Add(1) }})
	dbtest.WaitFor(t, 10*time.Second, "leadership", e.IsLeader)
	return e, &terms
}

// A connection cut shorter than the lease's safety deadline is ridden out by
// retries: the leader keeps its term. The same cut without retries ends it
// — the control that shows the test can fail.
func TestRetriesRideOutAShortCut(t *testing.T) {
	for _, tc := range []struct {
		name      string
		wrap      bool
		wantTerms int32
	}{{"resilient", true, 1}, {"raw", false, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			s, proxy := proxied(t)
			var store sqlease.LeaseStore = s
			if tc.wrap {
				store = resilient.Wrap(s, resilient.Config{})
			}
			e, terms := leader(t, store)
			tok, _ := e.Require(t.Context())
			cut(t, proxy, 600*time.Millisecond) // three renew intervals
			// Give a lost term time to be noticed and re-acquired.
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) && terms.Load() < 2 {
				time.Sleep(10 * time.Millisecond)
			}
			if got := terms.Load(); got != tc.wantTerms {
				t.Fatalf("terms after a 600ms cut: %d, want %d", got, tc.wantTerms)
			}
			if tc.wrap {
				if now, err := e.Require(t.Context()); err != nil || now != tok {
					t.Fatalf("the term did not survive the cut: %v %v (was %v)", now, err, tok)
				}
			}
		})
	}
}

// Slow statements: retries and waits never stretch a renew past the local
// safety deadline; the leader stops trusting its lease in time.
func TestRenewNeverStretchesPastDeadline(t *testing.T) {
	s, proxy := proxied(t)
	e, _ := leader(t, resilient.Wrap(s, resilient.Config{}))
	if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(`{"name":"slow","type":"latency","stream":"downstream","attributes":{"latency":10000}}`)); err != nil {
		t.Fatal(err)
	}
	slowed := time.Now()
	for e.IsLeader() {
		if time.Since(slowed) > 5*time.Second {
			t.Fatal("still leading 5 s into a database that answers in 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// trustedUntil = last renew sent + 3 s - 0.5 s, and the last renew was
	// sent at most one interval (200 ms) before the slowdown.
	if d := time.Since(slowed); d > 2500*time.Millisecond+100*time.Millisecond {
		t.Fatalf("gate closed %s after the slowdown, past the safety deadline (≤ 2.5 s)", d)
	}
}

// A long outage opens the breaker: calls fail fast with ErrCircuitOpen
// instead of waiting on the network, and the breaker closes once the
// database is back.
func TestBreakerOpensAndRecovers(t *testing.T) {
	s, proxy := proxied(t)
	r := resilient.Wrap(s, resilient.Config{MaxRetries: 1, BaseDelay: time.Millisecond, BreakerThreshold: 3, BreakerDelay: 300 * time.Millisecond})
	ctx := t.Context()
	if _, err := r.Leases(ctx); err != nil {
		t.Fatal(err)
	}
	addr := proxy.Listen
	proxy.Stop()
	for i := 0; i < 10 && !r.BreakerOpen(); i++ {
		if _, err := r.Leases(ctx); !errors.Is(err, sqlease.ErrTransient) {
			t.Fatalf("during the outage: want a transient error, got %v", err)
		}
	}
	if !r.BreakerOpen() {
		t.Fatal("breaker still closed after repeated transient failures")
	}
	start := time.Now()
	_, err := r.Leases(ctx)
	if !errors.Is(err, resilient.ErrCircuitOpen) || !errors.Is(err, sqlease.ErrTransient) {
		t.Fatalf("open breaker: want ErrCircuitOpen (transient), got %v", err)
	}
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Fatalf("an open breaker took %s to refuse", d)
	}
	proxy.Listen = addr
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := r.Leases(ctx); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("breaker did not recover: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r.BreakerOpen() {
		t.Fatal("breaker open after a success")
	}
}

var _ = net.Listen
