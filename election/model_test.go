package election_test

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"strconv"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
)

// Model-based test of the elector (SPEC §2) with rapid: real electors run
// against an in-memory lease store whose every call rapid may delay before
// it takes effect (a request in flight), delay after (a slow response),
// fail before (lost), or fail after it took effect (applied, answer lost),
// while a rival grabs the lease whenever it is free. After every sample,
// the reference model — the store's history of terms, in database time —
// must agree with each elector: an open gate (Require succeeds) means the
// elector's term is the lease's valid term at that instant. That is G1:
// the store has one valid term at a time. The store's clock is the host's,
// so the check is exact, with no allowance for skew.

// term is one epoch's validity in the model: valid from acquired until
// expires (moved by renewals, cut by a release).
type term struct {
	holder            string
	acquired, expires time.Time
}

// faultyStore is the lease store the electors see.
type faultyStore struct {
	mu     sync.Mutex
	cur    sqlease.Lease // the row; zero Epoch: none
	terms  map[int64]*term
	shrink time.Duration // a store that lies (the checker's own test)
	plan   func() fault
}

// fault is what happens to one call.
type fault struct {
	before, after       time.Duration
	failBefore, failAft bool
}

var errInjected = errors.New("injected database error")

func (s *faultyStore) call(ctx context.Context, apply func(now time.Time) (sqlease.Lease, error)) (sqlease.Lease, error) {
	f := s.plan()
	sleep := func(d time.Duration) error {
		if d <= 0 {
			return nil
		}
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := sleep(f.before); err != nil {
		return sqlease.Lease{}, err
	}
	if f.failBefore {
		return sqlease.Lease{}, errInjected
	}
	s.mu.Lock()
	l, err := apply(time.Now())
	s.mu.Unlock()
	if err := sleep(f.after); err != nil {
		return sqlease.Lease{}, err
	}
	if f.failAft {
		return sqlease.Lease{}, errInjected
	}
	return l, err
}

func (s *faultyStore) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (sqlease.Lease, error) {
	return s.call(ctx, func(now time.Time) (sqlease.Lease, error) { return s.acquireAt(now, name, holder, ttl) })
}

func (s *faultyStore) acquireAt(now time.Time, name, holder string, ttl time.Duration) (sqlease.Lease, error) {
	if s.cur.Epoch != 0 && now.Before(s.cur.ExpiresAt) {
		l := s.cur
		l.ObservedAt = now
		return l, sqlease.ErrLeaseHeld
	}
	exp := now.Add(ttl - s.shrink)
	s.cur = sqlease.Lease{Name: name, Holder: holder, Epoch: s.cur.Epoch + 1, AcquiredAt: now, RenewedAt: now, ExpiresAt: exp, ObservedAt: now}
	s.terms[s.cur.Epoch] = &term{holder: holder, acquired: now, expires: exp}
	return s.cur, nil
}

func (s *faultyStore) Renew(ctx context.Context, tok sqlease.Token, ttl time.Duration) (sqlease.Lease, error) {
	return s.call(ctx, func(now time.Time) (sqlease.Lease, error) {
		if s.cur.Holder != tok.Holder || s.cur.Epoch != tok.Epoch || !now.Before(s.cur.ExpiresAt) {
			return sqlease.Lease{}, sqlease.ErrLeaseLost
		}
		s.cur.RenewedAt, s.cur.ExpiresAt, s.cur.ObservedAt = now, now.Add(ttl-s.shrink), now
		s.terms[tok.Epoch].expires = s.cur.ExpiresAt
		return s.cur, nil
	})
}

func (s *faultyStore) Release(ctx context.Context, tok sqlease.Token) error {
	_, err := s.call(ctx, func(now time.Time) (sqlease.Lease, error) {
		if s.cur.Holder != tok.Holder || s.cur.Epoch != tok.Epoch || !now.Before(s.cur.ExpiresAt) {
			return sqlease.Lease{}, sqlease.ErrLeaseLost
		}
		s.cur.ExpiresAt = now
		s.terms[tok.Epoch].expires = now
		return s.cur, nil
	})
	return err
}

func (s *faultyStore) Lease(ctx context.Context, name string) (sqlease.Lease, error) {
	return s.call(ctx, func(now time.Time) (sqlease.Lease, error) {
		if s.cur.Epoch == 0 {
			return sqlease.Lease{}, sqlease.ErrNoLease
		}
		l := s.cur
		l.ObservedAt = now
		return l, nil
	})
}

func (s *faultyStore) Leases(ctx context.Context) ([]sqlease.Lease, error) {
	l, err := s.Lease(ctx, "")
	if err != nil {
		return nil, nil
	}
	return []sqlease.Lease{l}, nil
}

func (s *faultyStore) Fenced(context.Context, sqlease.Token, func(*sql.Tx) error) error {
	return errors.New("not used")
}

// validIn reports whether epoch's term, held by holder, was valid at some
// instant of [from, to].
func (s *faultyStore) validIn(epoch int64, holder string, from, to time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.terms[epoch]
	return t != nil && t.holder == holder && !t.acquired.After(to) && t.expires.After(from)
}

// runModel runs one scenario drawn by rt and returns the first
// disagreement between an elector and the model, if any.
func runModel(rt *rapid.T) string {
	// The scenario's faults, drawn up front so that rapid can shrink them.
	faults := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) fault {
		// Delays around the margin (50 ms) and the renew interval (75 ms).
		d := rapid.SampledFrom([]time.Duration{0, 5 * time.Millisecond, 80 * time.Millisecond, 200 * time.Millisecond})
		return fault{before: d.Draw(t, "before"), after: d.Draw(t, "after"),
			failBefore: rapid.IntRange(0, 5).Draw(t, "failBefore") == 0, failAft: rapid.IntRange(0, 9).Draw(t, "failAfter") == 0}
	}), 20, 60).Draw(rt, "faults")
	return runScenario(rt, faults, rapid.IntRange(1, 2).Draw(rt, "electors"), rapid.IntRange(0, 3).Draw(rt, "rival") == 0, 0)
}

// runScenario runs electors (and perhaps a rival) against a store whose
// calls suffer faults in turn, for 600 ms, checking every elector's gate
// against the store's terms.
func runScenario(tb interface{ Fatal(...any) }, faults []fault, electors int, rival bool, shrink time.Duration) string {
	const lease = 300 * time.Millisecond
	var planMu sync.Mutex
	next := 0
	st := &faultyStore{terms: map[int64]*term{}, shrink: shrink, plan: func() fault {
		planMu.Lock()
		defer planMu.Unlock()
		f := faults[next%len(faults)]
		next++
		return f
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	var els []*election.Elector
	for i := range electors {
		el, err := election.New(election.Config{Store: st, LeaseName: "model", HolderID: string(rune('a' + i)),
			LeaseDuration: lease, RenewInterval: lease / 4, AcquireInterval: 20 * time.Millisecond, ReleaseTimeout: 100 * time.Millisecond})
		if err != nil {
			tb.Fatal(err)
		}
		els = append(els, el)
		wg.Add(1)
		go func() { defer wg.Done(); _ = el.Run(ctx) }()
	}
	if rival { // a node outside the test that takes the lease whenever it is free
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				st.mu.Lock()
				_, _ = st.acquireAt(time.Now(), "model", "rival", lease/3)
				st.mu.Unlock()
				time.Sleep(lease / 2)
			}
		}()
	}
	var bad string
	for ctx.Err() == nil && bad == "" {
		for _, el := range els {
			from := time.Now()
			tok, err := el.Require(ctx)
			to := time.Now()
			if err == nil && !st.validIn(tok.Epoch, tok.Holder, from, to) {
				bad = "elector " + tok.Holder + " acts under epoch " + strconv.FormatInt(tok.Epoch, 10) + " outside its term in the store"
			}
		}
		time.Sleep(200 * time.Microsecond)
	}
	cancel()
	wg.Wait()
	return bad
}

// TestElectorAgainstModel: in every scenario rapid draws, an elector's open
// gate is its valid term in the store. 15 scenarios by default
// (-rapid.checks=N for more).
func TestElectorAgainstModel(t *testing.T) {
	if testing.Short() {
		t.Skip("runs scenarios of 0.6 s each")
	}
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		_ = f.Value.Set("15")
		defer f.Value.Set(f.DefValue)
	}
	rapid.Check(t, func(rt *rapid.T) {
		if bad := runModel(rt); bad != "" {
			rt.Fatal(bad)
		}
	})
}

// TestModelCatchesAnOverTrustingElector: the check can fail. Against a
// store that grants leases 120 ms shorter than asked — so the elector's
// deadline, computed from what it asked, outlives its term — and whose
// renewals hang for 200 ms after the first acquire, the gate stays open
// past the term, and the check says so.
func TestModelCatchesAnOverTrustingElector(t *testing.T) {
	faults := []fault{{}, {}}
	for range 40 {
		faults = append(faults, fault{before: 200 * time.Millisecond})
	}
	if bad := runScenario(t, faults, 1, false, 120*time.Millisecond); bad == "" {
		t.Fatal("an elector trusting past its term went unnoticed: the model check cannot fail")
	}
}

// TestElectorTrustsFromSendTime: a renew whose answer comes 80 ms late (more
// than the 50 ms margin), then a renew that hangs past the lease: an
// elector that counted its trust from the answer's arrival instead of the
// request's send would keep its gate open 30 ms past its term (checked:
// that change to election.lead fails this test); one that counts from the
// send does not.
func TestElectorTrustsFromSendTime(t *testing.T) {
	faults := []fault{{}, {}, {after: 80 * time.Millisecond}, {before: 200 * time.Millisecond}}
	for range 40 {
		faults = append(faults, fault{})
	}
	if bad := runScenario(t, faults, 1, false, 0); bad != "" {
		t.Fatal(bad)
	}
}
