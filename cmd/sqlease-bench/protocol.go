package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// The protocol scenario (issue 32): placement by node's protocol
// (model/assign.pml) run by K bench nodes directly on the store's
// statements — without the singleton package (which runs the same protocol) and its bodies — to
// measure what the design costs and how fast it moves singletons, on the
// real databases. Each node, every renew interval (2 s; lease 6 s): renews
// its member lease (acquires it when it has none), reads Placement, places
// unplaced singletons up to its fair share (⌈N / live nodes⌉; beyond it when
// some stay unplaced for two intervals), reads its assignments, and gives
// a surplus to a live node below its share. It wakes early when a live
// member lease it saw is due to expire. Measured: idle statements/s
// (server-counted) once settled; after one node stops dead (no release),
// the time from its last renew until every one of its singletons is
// assigned to a live node; after a new node joins, the time until it holds
// its share and the number of singletons moved (each should move once).

const (
	protoLease = 6 * time.Second
	protoRenew = 2 * time.Second
)

type protoNode struct {
	holder    string
	st        *sqlstore.Store
	names     []string
	lastRenew atomic.Int64 // unix nanos of the last successful renew's send
	moved     *atomic.Int64
}

func (p *protoNode) run(ctx context.Context) {
	var tok sqlease.Token
	unplacedFor := 0
	for ctx.Err() == nil {
		sent := time.Now()
		if tok.IsZero() {
			if l, err := p.st.Acquire(ctx, sqlstore.MemberLeasePrefix+p.holder, p.holder, protoLease); err == nil {
				tok = l.Token()
				p.lastRenew.Store(sent.UnixNano())
			}
		} else if err := p.st.RenewMember(ctx, tok, protoLease); err != nil {
			tok = sqlease.Token{}
		} else {
			p.lastRenew.Store(sent.UnixNano())
		}
		wake := protoRenew
		if !tok.IsZero() {
			if v, err := p.st.Placement(ctx); err == nil {
				wake = p.place(ctx, tok, v, &unplacedFor)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(wake):
		}
	}
}

// place acts on one Placement reading and returns when to look again.
func (p *protoNode) place(ctx context.Context, tok sqlease.Token, v sqlstore.PlacementView, unplacedFor *int) time.Duration {
	total := v.Unplaced
	held := 0
	for _, n := range v.Nodes {
		total += n.Assigned
		if n.Holder == p.holder && n.Epoch == tok.Epoch {
			held = n.Assigned
		}
	}
	live := max(len(v.Nodes), 1)
	share := (total + live - 1) / live
	if v.Unplaced > 0 {
		*unplacedFor++
		want := share - held
		if *unplacedFor > 2 {
			want = v.Unplaced // nobody else takes them: beyond the share
		}
		// Nodes placing at once may pick the same candidates (MariaDB:
		// the candidates are read without SKIP LOCKED, and one of two
		// concurrent placements is often a deadlock victim): the loser
		// places again at once, not an interval later.
		for attempt := 0; want > 0 && attempt < 4; attempt++ {
			n, err := p.st.PlaceSingletons(ctx, tok, p.names, want)
			if errors.Is(err, sqlease.ErrTransient) {
				time.Sleep(time.Duration(attempt+1) * 5 * time.Millisecond)
				continue
			}
			if err != nil {
				break
			}
			held += int(n)
			if int(n) >= want || int(n) >= v.Unplaced {
				break
			}
			v.Unplaced -= int(n)
			want -= int(n)
		}
	} else {
		*unplacedFor = 0
	}
	if held > share {
		for _, n := range v.Nodes {
			if n.Holder == p.holder || n.Assigned >= share || held <= share {
				continue
			}
			k := min(held-share, share-n.Assigned)
			mine, err := p.st.AssignedSingletons(ctx, tok)
			if err != nil || len(mine) < k {
				break
			}
			give := make([]string, k)
			for i := range k {
				give[i] = mine[len(mine)-1-i].Name
			}
			if moved, err := p.st.GiveSingletons(ctx, tok, n.Holder, give); err == nil {
				held -= int(moved)
				p.moved.Add(moved)
			}
		}
	}
	// Wake when a live member lease it saw is due, to take its
	// singletons over within a lease + an acquire interval.
	wake := protoRenew
	for _, n := range v.Nodes {
		if n.Holder == p.holder {
			continue
		}
		if d := n.ExpiresAt.Sub(v.Now) + 50*time.Millisecond; d > 0 && d < wake {
			wake = d
		}
	}
	return wake
}

type protoRun struct {
	settle, failover, join time.Duration
	idle, idleClient       float64
	deadHeld, joinHeld     int
	moved                  int64
}

func protocolScenario(ctx context.Context, e *env, dialect string, n, nodes, runs int) bool {
	fmt.Printf("\n== placement-by-node protocol (bench nodes on the store's statements, not the singleton package) — %s, %d singletons, %d nodes, lease %s, renew %s\n",
		dialect, n, nodes, protoLease, protoRenew)
	var idle, idleClient, fo, join []float64
	if !rounds(ctx, e, runs, func() (protoRun, error) { return runProtocol(ctx, e, dialect, n, nodes) }, func(i int, bg float64, r protoRun) {
		srv := "n/a"
		if r.idle >= 0 {
			srv = fmt.Sprintf("%.2f", r.idle)
			idle = append(idle, r.idle)
		}
		srv += " server"
		if dialect != "mysql" { // MariaDB's pools are not traced: the server counts
			srv += fmt.Sprintf(", %.2f client", r.idleClient)
			idleClient = append(idleClient, r.idleClient)
		}
		fo = append(fo, float64(r.failover))
		join = append(join, float64(r.join))
		fmt.Printf("  run %d [bg %.0f%%]: settled in %s; idle statements/s %s; a node holding %d stopped dead: all on live nodes %s after its last renew; a joining node got %d in %s (balanced), %d moved\n",
			i, bg*100, fmtDur(r.settle), srv, r.deadHeld, fmtDur(r.failover), r.joinHeld, fmtDur(r.join), r.moved)
	}) {
		return false
	}
	if len(fo) > 0 {
		line := fmt.Sprintf("  median: failover %s (bound: lease + acquire = %s), join %s (one renew interval: %s)",
			fmtDur(time.Duration(medianOf(fo))), protoLease+time.Second, fmtDur(time.Duration(medianOf(join))), protoRenew)
		if len(idle) > 0 {
			line += fmt.Sprintf(", idle %.2f statements/s (server)", medianOf(idle))
		}
		if len(idleClient) > 0 {
			line += fmt.Sprintf(", idle %.2f statements/s (client)", medianOf(idleClient))
		}
		fmt.Println(line)
	}
	return true
}

func runProtocol(ctx context.Context, e *env, dialect string, n, k int) (res protoRun, err error) {
	res.idle = -1
	t, err := e.newTarget(ctx, dialect)
	if err != nil {
		return res, err
	}
	defer t.cleanup()
	tr := newTracer() // the nodes' statements, counted client-side
	open := func() (*sqlstore.Store, error) { return t.open(tr) }
	admin, err := t.open(nil)
	if err != nil {
		return res, err
	}
	defer admin.DB().Close()
	if err := t.migrate(ctx, admin); err != nil {
		return res, err
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("s-%06d", i)
	}
	if err := ensureMany(ctx, admin, names); err != nil {
		return res, err
	}
	var moved atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	start := func(i int) (*protoNode, context.CancelFunc, error) {
		st, err := open()
		if err != nil {
			return nil, nil, err
		}
		p := &protoNode{holder: fmt.Sprintf("node-%d", i), st: st, names: names, moved: &moved}
		c, cancel := context.WithCancel(ctx)
		wg.Add(1)
		go func() { defer wg.Done(); defer st.DB().Close(); p.run(c) }()
		return p, cancel, nil
	}
	var cancels []context.CancelFunc
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	var ps []*protoNode
	for i := range k {
		p, c, err := start(i)
		if err != nil {
			return res, err
		}
		ps, cancels = append(ps, p), append(cancels, c)
	}
	counts := func() (map[string]int, int, error) {
		v, err := admin.Placement(ctx)
		if err != nil {
			return nil, 0, err
		}
		m := map[string]int{}
		for _, n := range v.Nodes {
			m[n.Holder] = n.Assigned
		}
		return m, v.Unplaced, nil
	}
	waitUntil := func(limit time.Duration, cond func(map[string]int, int) bool) (time.Duration, error) {
		t0 := time.Now()
		for time.Since(t0) < limit {
			m, un, err := counts()
			if err == nil && cond(m, un) {
				return time.Since(t0), nil
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
		m, un, _ := counts()
		return 0, fmt.Errorf("not within %s: %v, %d unplaced", limit, m, un)
	}
	// Balanced: every singleton on a live node, none above the fair share
	// ⌈N / nodes⌉ (1000 on 3 may settle at 334/334/332).
	balanced := func(nodes int) func(map[string]int, int) bool {
		share := (n + nodes - 1) / nodes
		return func(m map[string]int, un int) bool {
			if un > 0 || len(m) != nodes {
				return false
			}
			for _, c := range m {
				if c > share {
					return false
				}
			}
			return true
		}
	}
	if res.settle, err = waitUntil(time.Minute, balanced(k)); err != nil {
		return res, fmt.Errorf("settle: %w", err)
	}
	// Idle, counted by the server (without the bench's own reads).
	time.Sleep(protoRenew)
	s0, ok0 := e.serverCalls(ctx, t)
	c0 := tr.snapshot()
	time.Sleep(20 * time.Second)
	c1 := tr.snapshot()
	s1, ok1 := e.serverCalls(ctx, t)
	if ok0 && ok1 {
		res.idle = float64(s1-s0) / 20
	}
	var calls int64
	for q, s := range c1.Stmts {
		calls += s.Calls - c0.Stmts[q].Calls
	}
	calls += (c1.Begins - c0.Begins) + (c1.Commits - c0.Commits) + (c1.Rollbacks - c0.Rollbacks)
	res.idleClient = float64(calls) / 20
	// kill -9 of node 0: it stops renewing and placing, releases nothing.
	m, _, _ := counts()
	res.deadHeld = m[ps[0].holder]
	cancels[0]()
	last := time.Unix(0, ps[0].lastRenew.Load())
	if _, err = waitUntil(2*protoLease, func(m map[string]int, un int) bool {
		_, alive := m[ps[0].holder]
		return un == 0 && !alive
	}); err != nil {
		return res, fmt.Errorf("failover: %w", err)
	}
	res.failover = time.Since(last)
	if _, err := waitUntil(time.Minute, balanced(k-1)); err != nil {
		return res, fmt.Errorf("settle after the failover: %w", err)
	}
	// A node joins.
	moved.Store(0)
	p, c, err := start(k)
	if err != nil {
		return res, err
	}
	cancels = append(cancels, c)
	if res.join, err = waitUntil(time.Minute, func(m map[string]int, un int) bool { return m[p.holder] > 0 && balanced(k)(m, un) }); err != nil {
		return res, fmt.Errorf("join: %w", err)
	}
	m, _, _ = counts()
	res.joinHeld = m[p.holder]
	res.moved = moved.Load()
	return res, nil
}
