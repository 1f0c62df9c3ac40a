package singleton

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/tick"
	"github.com/sqlease/sqlease/sqlstore"
)

// Placement by node (package doc): while this node holds its member lease,
// lead reads the placement every renew interval and places, gives and runs
// singletons accordingly.

// placer is the state of one member term's placement loop.
type placer struct {
	n           *Node
	mtok        sqlease.Token
	ctx         context.Context
	unplacedFor int // readings in a row with singletons unplaced
	// unplacedSince: the first of those readings. Readings come every
	// renew interval and at every kick (a takeover, a body's end), so
	// counting readings alone let a burst of kicks pass for "nobody else
	// takes them" within milliseconds of a member's takeover: the node
	// took all of the dead member's singletons, started one and gave it
	// away at once — moved twice (CI under load,
	// TestSingletonsMoveOnceOnKillAndJoin).
	unplacedSince time.Time
	stuck         int // unplaced singletons none of which this node could place (none registered here)
	lastHeld      int // this node's count in the placement at the last read of its assignments
	reads         int // placement reads, for the periodic re-read of the assignments
	terms         []*term

	mu       sync.Mutex
	watching map[string]bool // advisory mode: the live members whose session lock is watched
}

// lead is the member elector's OnStartedLeading: the placement loop of one
// member term. It returns when the term ends; every body of the term then
// stops at once (the elector has closed the gate already).
func (n *Node) lead(ctx context.Context, mtok sqlease.Token) {
	p := &placer{n: n, mtok: mtok, ctx: ctx, lastHeld: -1, watching: map[string]bool{}}
	n.dirty.Store(true)
	defer p.end()
	tick.Loop(ctx, n.kick, p.reconcile)
}

// end stops the bodies of the member term, a loss, and waits for them
// (at most each one's stop timeout: a body that ignores its context has
// its gate closed anyway).
func (p *placer) end() {
	var wg sync.WaitGroup
	for _, t := range p.terms {
		t.lose()
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-t.done:
			case <-time.After(DefaultStopTimeout):
			}
		}()
	}
	wg.Wait()
}

// unplacedLong reports whether singletons have been unplaced long enough
// to be taken beyond this node's share: three readings in a row, over
// three renew intervals at least (every live node has read the placement
// since, and taken its share).
func (p *placer) unplacedLong() bool {
	return p.unplacedFor > 2 && time.Since(p.unplacedSince) >= 3*p.n.cfg.RenewInterval
}

// reconcile acts on one reading of the placement and returns when to look
// again.
func (p *placer) reconcile() time.Duration {
	n, ctx := p.n, p.ctx
	wake := n.cfg.RenewInterval
	n.mu.Lock()
	stopping := n.stopping
	n.mu.Unlock()
	if stopping {
		return wake // every body is being stopped; the member lease is released next
	}
	v, err := n.cfg.Store.Placement(ctx)
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("singleton_placement_failed", slog.String("error", err.Error()))
		}
		return wake
	}
	p.reads++
	me := n.cfg.HolderID
	total, held, live, self := v.Unplaced, 0, 0, false
	for _, nd := range v.Nodes {
		total += nd.Assigned
		live++
		if nd.Holder == me && nd.Epoch == p.mtok.Epoch {
			held, self = nd.Assigned, true
		}
	}
	if !self {
		live++ // renewed by this node's own account: it counts itself
	}
	share := (total + live - 1) / live
	var names []string
	for _, e := range n.snapshot() {
		e.mu.Lock()
		if !e.closing && !e.giving {
			names = append(names, e.name)
		}
		e.mu.Unlock()
	}
	sort.Strings(names)
	dirty := n.dirty.Swap(false)
	waiting := false // for an old node's lease: try again every round
	if v.Unplaced > 0 && len(names) > 0 {
		k := len(names)
		names = n.upgradeFence(ctx, names)
		waiting = len(names) < k
	}
	placed := 0
	if v.Unplaced > 0 && len(names) > 0 && (dirty || waiting || v.Unplaced > p.stuck) {
		if p.unplacedFor++; p.unplacedFor == 1 {
			p.unplacedSince = time.Now()
		}
		want := share - held
		if p.unplacedLong() {
			want = v.Unplaced // nobody else takes them: beyond the share
		}
		// Nodes placing at once may pick the same candidates (MariaDB
		// reads them without SKIP LOCKED, and one of two concurrent
		// placements is often a deadlock victim): the loser places again
		// at once, not an interval later.
		for attempt := 0; want > 0 && attempt < 4 && ctx.Err() == nil; attempt++ {
			k, err := n.cfg.Store.PlaceSingletons(ctx, p.mtok, names, want)
			if errors.Is(err, sqlease.ErrTransient) {
				time.Sleep(time.Duration(attempt+1) * 5 * time.Millisecond)
				continue
			}
			if err != nil {
				n.log.Warn("singleton_place_failed", slog.String("error", err.Error()))
				break
			}
			placed += int(k)
			if int(k) >= want || int(k) >= v.Unplaced {
				break
			}
			v.Unplaced -= int(k)
			want -= int(k)
		}
		held += placed
		p.stuck = 0
		if placed > 0 && held <= share {
			// It took no more than its share: count afresh. Counting on
			// from a fleet's start (several readings with some unplaced)
			// let a node that took a dead peer's over later take them
			// all, start one and give it away at once — moved twice (CI,
			// TestSingletonsMoveOnceOnKillAndJoin).
			p.unplacedFor = 0
		}
		if placed == 0 && p.unplacedLong() && !waiting {
			// None of them is registered here: do not try every interval.
			p.stuck = v.Unplaced
		}
		if placed > 0 {
			n.log.Info("singletons_placed", slog.Int("placed", placed), slog.Int("held", held), slog.Int("share", share),
				slog.Int("live_nodes", live), slog.Int64("member_epoch", p.mtok.Epoch))
		}
	} else if v.Unplaced == 0 {
		p.unplacedFor, p.stuck = 0, 0
	}
	// The assignments are read when they may have changed: placed here,
	// given to this node (its count changed), a body ended or a singleton
	// registered (dirty), and every 15 readings for what a count cannot
	// show (one given here while one was paused).
	if placed > 0 || dirty || held != p.lastHeld || p.reads%15 == 0 {
		as, err := n.cfg.Store.AssignedSingletons(ctx, p.mtok)
		if err != nil {
			n.dirty.Store(true)
			if ctx.Err() == nil {
				n.log.Warn("singleton_assignments_failed", slog.String("error", err.Error()))
			}
		} else {
			p.lastHeld = held
			p.apply(as)
		}
	}
	if held > share && !n.handingOver.Load() {
		p.rebalance(v, held, share)
	}
	// Wake when a live member lease it saw is due, to take its
	// singletons over within a lease + an acquire interval.
	for _, nd := range v.Nodes {
		if nd.Holder == me {
			continue
		}
		if n.cfg.SessionLocker != nil {
			p.watch(nd.Holder)
		}
		if d := nd.ExpiresAt.Sub(v.Now) + 50*time.Millisecond; d > 0 && d < wake {
			wake = d
		}
	}
	return wake
}

// apply starts a term for each singleton assigned here that runs nowhere
// here, and ends at once the terms whose assignment is gone.
func (p *placer) apply(as []sqlstore.Assignment) {
	n := p.n
	assigned := make(map[string]int64, len(as))
	for _, a := range as {
		assigned[a.Name] = a.Generation
	}
	live := p.terms[:0]
	for _, t := range p.terms {
		select {
		case <-t.done:
		default:
			live = append(live, t)
		}
	}
	p.terms = live
	now := n.cfg.Clock.Now()
	var fresh []newTerm
	for _, e := range n.snapshot() {
		gen, ok := assigned[e.name]
		e.mu.Lock()
		t, closing, giving := e.term, e.closing, e.giving
		if t != nil {
			e.mu.Unlock()
			if t.mtok != p.mtok || !ok || gen != t.tok.Epoch {
				n.log.Warn("singleton_assignment_lost", slog.String("singleton", e.name), slog.Int64("lease_epoch", t.tok.Epoch))
				t.lose() // not graceful: it runs elsewhere, or may
			}
			continue
		}
		if !ok || closing || giving || p.ctx.Err() != nil {
			e.mu.Unlock()
			continue
		}
		ctx, stop := context.WithCancel(p.ctx)
		t = &term{tok: sqlease.Token{Name: LeasePrefix + e.name, Holder: n.cfg.HolderID, Epoch: gen}, mtok: p.mtok,
			ctx: ctx, stop: stop, done: make(chan struct{})}
		e.term, e.acquired = t, now
		e.mu.Unlock()
		p.terms = append(p.terms, t)
		fresh = append(fresh, newTerm{e, t})
	}
	p.startBatch(fresh)
	for _, f := range fresh {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); f.e.run(f.t) }()
	}
}

// beforeBatchStart, when set by a test before the node runs, is called
// between the reading of the assignments and a batch start: an assignment
// moved there must be refused.
var beforeBatchStart func()

type newTerm struct {
	e *entry
	t *term
}

// startBatch records the first start of the new terms in one statement
// (sqlstore.StartManyAssigned), each fenced as its own start would be, and
// hands each term its outcome: the saved state, or a refusal that ends
// that term alone. Started one by one — a StartAssigned and a read of the
// state each, at most maxStarting at once — a dead node's 334 singletons
// took 0.13–0.45 s to run on the others in advisory mode on PostgreSQL. A
// term the batch did not settle (the gate closed, the statement failed)
// records its start itself.
func (p *placer) startBatch(fresh []newTerm) {
	n := p.n
	if len(fresh) == 0 || n.member.Ensure(p.mtok) != nil || p.ctx.Err() != nil {
		return
	}
	if beforeBatchStart != nil {
		beforeBatchStart()
	}
	starts := make([]sqlstore.Assignment, len(fresh))
	for i, f := range fresh {
		starts[i] = sqlstore.Assignment{Name: f.e.name, Generation: f.t.tok.Epoch}
	}
	// Seen through until the member lease's local deadline, as a term's
	// write (term.write): a start cut short after the server ran it would
	// be recorded twice.
	until, ok := n.member.ActUntil(p.mtok)
	if !ok {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), max(until.Sub(n.cfg.Clock.Now()), 0))
	started, err := n.cfg.Store.StartManyAssigned(wctx, n.cfg.HolderID, starts)
	cancel()
	if err != nil && p.ctx.Err() == nil {
		n.log.Warn("singleton_batch_start_failed", slog.Int("singletons", len(starts)), slog.Int("started", len(started)),
			slog.String("error", err.Error()))
	}
	for _, f := range fresh {
		if st, ok := started[f.e.name]; ok {
			f.t.first = &firstStart{state: st}
		} else if err == nil {
			f.t.first = &firstStart{refused: true}
		}
	}
}

// rebalance gives this node's surplus over its fair share to the live
// node furthest below it: the bodies first stop gracefully (their last
// saves are kept), then one statement moves them, each once. One
// handover at a time, off the placement loop.
func (p *placer) rebalance(v sqlstore.PlacementView, held, share int) {
	n := p.n
	to, least := "", share
	for _, nd := range v.Nodes {
		if nd.Holder != n.cfg.HolderID && nd.Assigned < least {
			to, least = nd.Holder, nd.Assigned
		}
	}
	if to == "" {
		return
	}
	k := min(held-share, share-least)
	type running struct {
		e  *entry
		t  *term
		at time.Time
	}
	var mine []running
	for _, e := range n.snapshot() {
		e.mu.Lock()
		if t := e.term; t != nil && t.mtok == p.mtok && !e.giving && !e.closing && !t.closed.Load() {
			mine = append(mine, running{e, t, e.acquired})
		}
		e.mu.Unlock()
	}
	if len(mine) == 0 {
		return
	}
	// The most recently gained first: the others have run here longest.
	sort.Slice(mine, func(i, j int) bool { return mine[i].at.After(mine[j].at) })
	mine = mine[:min(k, len(mine))]
	var names []string
	for _, r := range mine {
		r.e.mu.Lock()
		r.e.giving = true
		r.e.mu.Unlock()
		names = append(names, r.e.name)
	}
	n.log.Info("singleton_rebalanced", slog.Any("singletons", names), slog.String("to", to),
		slog.Int("held", held), slog.Int("share", share), slog.Int("live_nodes", len(v.Nodes)))
	n.handingOver.Store(true)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.handingOver.Store(false)
		var stops sync.WaitGroup
		for _, r := range mine {
			stops.Add(1)
			go func() { defer stops.Done(); r.e.stopBody(n.log, r.t) }()
		}
		stops.Wait()
		// The bodies are gone: only now does the assignment move.
		moved, err := n.cfg.Store.GiveSingletons(p.ctx, p.mtok, to, names)
		if err != nil && p.ctx.Err() == nil {
			n.log.Warn("singleton_give_failed", slog.String("to", to), slog.String("error", err.Error()))
		}
		for _, r := range mine {
			r.e.mu.Lock()
			r.e.giving = false
			r.e.mu.Unlock()
		}
		n.log.Info("singletons_given", slog.String("to", to), slog.Int64("moved", moved), slog.Int("asked", len(names)))
		n.changed() // those that did not move run here again
	}()
}

// giveAway moves names, whose bodies have stopped, from this node's member
// term mtok to the live node holding the fewest singletons, if there is
// one (Unregister).
func (n *Node) giveAway(ctx context.Context, mtok sqlease.Token, names []string) {
	if mtok.IsZero() {
		return
	}
	v, err := n.cfg.Store.Placement(ctx)
	if err != nil {
		n.log.Warn("singleton_placement_failed", slog.String("error", err.Error()))
		return
	}
	to, least := "", -1
	for _, nd := range v.Nodes {
		if nd.Holder != n.cfg.HolderID && (least < 0 || nd.Assigned < least) {
			to, least = nd.Holder, nd.Assigned
		}
	}
	if to == "" {
		return // no other live node: it stays assigned here until this node stops
	}
	if _, err := n.cfg.Store.GiveSingletons(ctx, mtok, to, names); err != nil {
		n.log.Warn("singleton_give_failed", slog.String("to", to), slog.String("error", err.Error()))
	}
}

// watch waits, in advisory mode, on the session lock of holder's member
// lease (SPEC §3: the database frees it as soon as it sees that node's
// session die) and then takes the lease over — bumping its epoch, so that
// none of holder's assignments is live any more, nor any of its writes
// accepted — releases it, and places at once: a dead node's singletons
// move within about a round trip of the database noticing, not a lease
// duration. A member lease that holder acquired without its lock (a frozen
// session kept it) is left to expire (Takeover: ErrLeaseHeld). One
// dedicated session per live peer while it lives; no statement while
// waiting.
func (p *placer) watch(holder string) {
	p.mu.Lock()
	if p.watching[holder] {
		p.mu.Unlock()
		return
	}
	p.watching[holder] = true
	p.mu.Unlock()
	n, ctx := p.n, p.ctx
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer func() {
			p.mu.Lock()
			delete(p.watching, holder)
			p.mu.Unlock()
		}()
		name := MemberPrefix + holder
		lock, err := n.cfg.SessionLocker(ctx, name)
		if err != nil {
			return // looked at again at the next reading
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = lock.Close(cctx)
			cancel()
		}()
		if err := lock.Lock(ctx); err != nil {
			return
		}
		l, err := lock.Takeover(ctx, name, n.cfg.HolderID, n.cfg.LeaseDuration)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, sqlease.ErrLeaseHeld) {
				n.log.Warn("singleton_member_takeover_failed", slog.String("member", holder), slog.String("error", err.Error()))
			}
			return
		}
		n.log.Info("singleton_member_taken_over", slog.String("member", holder), slog.Int64("member_epoch", l.Epoch),
			slog.String("reason", "its session lock was free: its session has ended"))
		if err := n.cfg.Leases.Release(ctx, l.Token()); err != nil && ctx.Err() == nil {
			n.log.Warn("singleton_member_release_failed", slog.String("member", holder), slog.String("error", err.Error()))
		}
		n.changed() // place its singletons now
	}()
}

// Rolling upgrade: a node of the protocol before placement by node runs a
// singleton while it holds the singleton's own lease, LeasePrefix + name.
// Such a node and a node placing by node must never both run one
// singleton. So a singleton is placed only once its old lease is held by
// UpgradeFenceHolder, for UpgradeFenceTTL: acquired, like any lease, only
// when no old node holds it live — and then no old node can acquire it (in
// advisory mode neither: its takeover through the session lock leaves a
// term acquired without the lock alone). A singleton whose old lease an old
// node holds live is left to it until that node stops or loses it.

// UpgradeFenceHolder holds the old per-singleton lease of every singleton
// placed by node; UpgradeFenceTTL is how long (DATEADD's seconds on SQL
// Server stay within an int).
const (
	UpgradeFenceHolder = sqlstore.UpgradeFenceHolder
	UpgradeFenceTTL    = 10 * 365 * 24 * time.Hour
)

// upgradeFence returns those of names that may be placed: their old lease
// holds the fence (once checked, remembered for the node's life).
func (n *Node) upgradeFence(ctx context.Context, names []string) []string {
	n.mu.Lock()
	if n.fenced == nil {
		n.fenced = map[string]bool{}
	}
	var todo []string
	for _, name := range names {
		if !n.fenced[name] {
			todo = append(todo, name)
		}
	}
	n.mu.Unlock()
	if len(todo) == 0 {
		return names
	}
	leases, err := n.cfg.Store.Leases(ctx) // one read for all of them
	if err != nil {
		n.log.Warn("singleton_upgrade_fence_failed", slog.String("error", err.Error()))
		return nil
	}
	old := map[string]sqlease.Lease{}
	for _, l := range leases {
		old[l.Name] = l
	}
	blocked := map[string]bool{}
	for _, name := range todo {
		l, ok := old[LeasePrefix+name]
		switch {
		case ok && l.Holder == UpgradeFenceHolder && !l.Expired():
		case ok && !l.Expired():
			blocked[name] = true
			n.log.Warn("singleton_held_by_old_node", slog.String("singleton", name), slog.String("old_holder", l.Holder),
				slog.String("hint", "a node of an older version runs it on its own lease; it is placed once that lease ends"))
			continue
		default:
			if _, err := n.cfg.Store.Acquire(ctx, LeasePrefix+name, UpgradeFenceHolder, UpgradeFenceTTL); err != nil {
				if !errors.Is(err, sqlease.ErrLeaseHeld) {
					n.log.Warn("singleton_upgrade_fence_failed", slog.String("singleton", name), slog.String("error", err.Error()))
				}
				blocked[name] = true
				continue
			}
		}
		n.mu.Lock()
		n.fenced[name] = true
		n.mu.Unlock()
	}
	out := names[:0:0]
	for _, name := range names {
		if !blocked[name] {
			out = append(out, name)
		}
	}
	return out
}
