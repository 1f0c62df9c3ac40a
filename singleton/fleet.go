package singleton

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/sqlease/sqlease"
)

// Spreading over the fleet (package doc): each node holds no more than its
// fair share while another is willing, and hands a surplus over.

// willing reports whether this node holds less than its fair share (and
// is not stopping).
func (n *Node) willing() bool {
	n.mu.Lock()
	share, stopping := n.share, n.stopping
	n.mu.Unlock()
	return !stopping && n.held() < share
}

func (n *Node) held() int {
	k := 0
	for _, e := range n.snapshot() {
		if e.el.IsLeader() {
			k++
		}
	}
	return k
}

// membership renews this node's member lease, recomputes the fair share
// from the live members and gives a surplus singleton back.
func (n *Node) membership(ctx context.Context) {
	name := MemberPrefix + n.cfg.HolderID
	var tok sqlease.Token
	t := time.NewTimer(0)
	defer t.Stop()
	defer func() {
		if !tok.IsZero() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = n.cfg.Leases.Release(rctx, tok)
			cancel()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(n.cfg.RenewInterval)
		if len(n.snapshot()) == 0 {
			// No singletons here: no member lease, no statements.
			if !tok.IsZero() {
				_ = n.cfg.Leases.Release(ctx, tok)
				tok = sqlease.Token{}
			}
			continue
		}
		if tok.IsZero() {
			if l, err := n.cfg.Leases.Acquire(ctx, name, n.cfg.HolderID, n.cfg.LeaseDuration); err == nil {
				tok = l.Token()
			}
		} else if _, err := n.cfg.Leases.Renew(ctx, tok, n.cfg.LeaseDuration); err != nil {
			tok = sqlease.Token{}
			continue
		}
		leases, err := n.cfg.Leases.Leases(ctx)
		if err != nil {
			continue
		}
		n.rebalance(leases)
	}
}

// rebalance computes the fair share and, when this node holds more than it
// while a live member holds less, resigns its most recently gained
// singleton.
func (n *Node) rebalance(leases []sqlease.Lease) {
	members := map[string]int{}
	names := map[string]bool{}
	for _, l := range leases {
		switch {
		case strings.HasPrefix(l.Name, MemberPrefix) && !l.Expired():
			members[strings.TrimPrefix(l.Name, MemberPrefix)] += 0
		case strings.HasPrefix(l.Name, LeasePrefix):
			names[strings.TrimPrefix(l.Name, LeasePrefix)] = true
		}
	}
	for _, e := range n.snapshot() {
		names[e.name] = true
	}
	members[n.cfg.HolderID] += 0
	for _, l := range leases {
		if strings.HasPrefix(l.Name, LeasePrefix) && !l.Expired() {
			if _, live := members[l.Holder]; live {
				members[l.Holder]++
			}
		}
	}
	share := (len(names) + len(members) - 1) / len(members)
	n.mu.Lock()
	n.share = share
	stopping := n.stopping
	n.mu.Unlock()
	if stopping {
		return // every body is being stopped already
	}
	under := false
	for h, k := range members {
		if h != n.cfg.HolderID && k < share {
			under = true
		}
	}
	var mine []*entry
	for _, e := range n.snapshot() {
		if e.el.IsLeader() {
			mine = append(mine, e)
		}
	}
	if len(mine) <= share || !under || n.handingOver.Load() {
		return
	}
	sort.Slice(mine, func(i, j int) bool { return mine[i].acquiredAt().After(mine[j].acquiredAt()) })
	e := mine[0]
	tok, err := e.el.Require(context.Background())
	if err != nil {
		return
	}
	n.log.Info("singleton_rebalanced", slog.String("singleton", e.name), slog.Int64("lease_epoch", tok.Epoch),
		slog.Int("held", len(mine)), slog.Int("share", share), slog.Int("live_nodes", len(members)))
	reason := fmt.Sprintf("rebalance: this node holds %d singletons, its fair share is %d", len(mine), share)
	// A handover: the body stops while the term goes on (its last saves
	// are kept), then the lease is given back. One at a time, off the
	// membership loop, which keeps renewing meanwhile.
	n.handingOver.Store(true)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.handingOver.Store(false)
		e.stopBody(n.log, tok)
		e.el.Resign(tok, reason)
	}()
}

func (e *entry) acquiredAt() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.acquired
}
