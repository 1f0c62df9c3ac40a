package dashboard

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/history"
	"github.com/sqlease/sqlease/sqlstore"
)

// How the overview tells a node's state, at no cost to an idle fleet.
//
// A node's presence lease (history.Presence) is renewed every 30 s for
// 90 s: renewing it faster would raise every idle fleet's database load,
// which the measurements hold at ≤ 1 statement/s for three nodes. So
// presence only says a node existed. That a node died is read from the
// leases it already renews every renew interval — the leader's, a claim
// worker's (worker:), a singleton member's (member:) and its singletons'
// (singleton:): one of them that expired without a release (its expiry is
// a whole lease duration after its last renewal; a release expires it
// earlier) or a leadership taken over from it (the history's taken_over)
// is evidence; it stands until the node shows a later sign of life (any of
// its leases renewed after it). So a killed leader, worker or singleton
// holder is marked unreachable within the failover bound. A follower that
// holds no such lease writes nothing but its presence, so its death shows
// only when that expires (90 s): the price of an idle follower costing
// the database nothing.
//
// Readiness and version come from the node's status record
// (sqlstore.EventNodeStatus, written by history.RunPresence only when
// they change), one index lookup per node shown.

// Node states.
const (
	nodeReady       = "ready"
	nodeNotReady    = "not_ready"
	nodeUnknown     = "unknown" // no status record (an older version, or not yet)
	nodeUnreachable = "unreachable"
	nodeStopped     = "stopped"
)

// statusLookups bounds the status records one page reads.
const statusLookups = 100

// nodeRow is one node seen recently.
type nodeRow struct {
	Holder   string
	Roles    []string
	LastSeen time.Time
	ThisNode bool
	// State is one of the node states; Why says why when it is not ready.
	State, Why string
	// Since: when the state began (unreachable: the evidence's time;
	// others: the status record's), zero when unknown.
	Since time.Time
	// Version and Durability as the node's status record says.
	Version, Durability string
	// session: its status record says it keeps a database session
	// (Config.Sessions can see).
	session bool
}

// Live reports whether the node counts as up.
func (n nodeRow) Live() bool {
	return n.State == nodeReady || n.State == nodeNotReady || n.State == nodeUnknown
}

// evidence is the earliest proof seen that a node stopped renewing.
type evidence struct {
	at  time.Time
	why string
}

// goneMemo keeps the evidence a page saw, per holder, until the node shows
// a later sign of life: a singleton's lease taken over by another node no
// longer names the dead one, and without the memo the dead node would look
// alive again until its presence expires.
type goneMemo struct {
	mu sync.Mutex
	m  map[string]evidence
}

const goneMemoMax = 1000

func (g *goneMemo) merge(ev map[string]evidence, sign map[string]time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]evidence{}
	}
	for h, e := range ev {
		if old, ok := g.m[h]; !ok || e.at.Before(old.at) || sign[h].After(old.at) {
			if len(g.m) < goneMemoMax || ok {
				g.m[h] = e
			}
		}
	}
	for h, e := range g.m {
		switch s, known := sign[h]; {
		case !known:
			delete(g.m, h) // holds no lease any more: presence tells
		case s.After(e.at):
			delete(g.m, h) // alive after all
		default:
			if _, ok := ev[h]; !ok {
				ev[h] = e
			}
		}
	}
}

// unreleased reports whether l, expired, ran out rather than being
// released: a renewal sets its expiry a whole lease duration after its
// renewal, a release earlier (Release expires it at once).
func unreleased(l sqlease.Lease, duration time.Duration) bool {
	return l.ExpiresAt.Sub(l.RenewedAt) >= duration*9/10
}

// nodes builds the node rows from the leases and the leader's history
// (newest first), in database time now.
func (d *Dashboard) nodes(ctx context.Context, leases []sqlease.Lease, events []sqlstore.LeaseEvent, now time.Time) []nodeRow {
	leaderLease := d.cfg.Elector.LeaseName()
	duration := d.cfg.Elector.Config().LeaseDuration
	sign := map[string]time.Time{} // the latest renewal of any lease naming the holder
	roles := map[string][]string{}
	presence := map[string]sqlease.Lease{}
	ev := map[string]evidence{}
	note := func(h string, t time.Time) {
		if t.After(sign[h]) {
			sign[h] = t
		}
	}
	for _, l := range leases {
		if l.Expired() && now.Sub(l.ExpiresAt) > seenWithin {
			continue
		}
		var role string
		switch {
		case strings.HasPrefix(l.Name, nodePrefix):
			presence[l.Holder] = l
			note(l.Holder, l.RenewedAt)
			continue
		case l.Name == leaderLease:
			role = "leader"
		case strings.HasPrefix(l.Name, workerPrefix):
			role = "claim worker"
		case strings.HasPrefix(l.Name, memberPrefix):
			role = "singleton member"
		case strings.HasPrefix(l.Name, singletonPrefix) && l.Holder == sqlstore.UpgradeFenceHolder:
			continue // placed by node: the rolling upgrade's fence, no node
		case strings.HasPrefix(l.Name, singletonPrefix):
			role = "runs " + strings.TrimPrefix(l.Name, singletonPrefix)
		default:
			continue
		}
		note(l.Holder, l.RenewedAt)
		if !l.Expired() {
			roles[l.Holder] = append(roles[l.Holder], role)
		} else if unreleased(l, duration) {
			e := evidence{at: l.ExpiresAt, why: fmt.Sprintf("its lease %s (epoch %d) expired without a release", l.Name, l.Epoch)}
			if old, ok := ev[l.Holder]; !ok || e.at.Before(old.at) {
				ev[l.Holder] = e
			}
		}
	}
	// A leadership taken over: the term before it expired without a
	// release.
	for i, e := range events {
		if e.Event != sqlstore.EventTakenOver || now.Sub(e.At) > seenWithin {
			continue
		}
		prev := ""
		for _, p := range events[i+1:] {
			if p.Epoch == e.Epoch-1 && p.Event != sqlstore.EventNodeStatus {
				prev = p.Holder
				break
			}
		}
		if prev == "" {
			prev = takenFrom(e.Reason)
		}
		if prev == "" || prev == e.Holder {
			continue
		}
		if _, known := sign[prev]; !known {
			continue // holds nothing: its presence is gone too
		}
		x := evidence{at: e.At, why: fmt.Sprintf("its leadership (epoch %d) was taken over by %s: its lease expired without a release", e.Epoch-1, e.Holder)}
		if old, ok := ev[prev]; !ok || x.at.Before(old.at) {
			ev[prev] = x
		}
	}
	for h, e := range ev {
		if sign[h].After(e.at) {
			delete(ev, h) // a sign of life since
		}
	}
	d.gone.merge(ev, sign)

	me := d.cfg.Elector.HolderID()
	all := map[string]*nodeRow{}
	for h := range sign {
		all[h] = &nodeRow{Holder: h, LastSeen: sign[h], Roles: roles[h]}
	}
	if all[me] == nil {
		all[me] = &nodeRow{Holder: me, LastSeen: now}
	}
	all[me].ThisNode = true
	// The database's view of the node sessions (Config.Sessions): a node
	// that keeps one (its status record says session=…) and has none now is
	// unreachable at once, a plain follower too.
	var alive func(string) bool
	if d.cfg.Sessions != nil {
		var err error
		if alive, err = d.cfg.Sessions(ctx); err != nil {
			d.log.Debug("dashboard_sessions_failed", errAttr(err))
			alive = nil
		}
	}
	lookups := 0
	for h, n := range all {
		p, hasPresence := presence[h]
		e, dead := ev[h]
		switch {
		case n.ThisNode:
			// Serving this page: reachable, its readiness first hand.
		case dead:
			n.State, n.Why, n.Since = nodeUnreachable, e.why+"; no sign of it since", e.at
			continue
		case hasPresence && p.Expired() && !unreleased(p, history.DefaultPresenceTTL):
			n.State, n.Why, n.Since = nodeStopped, "stopped (it released its presence)", p.ExpiresAt
			continue
		case len(n.Roles) == 0 && (!hasPresence || p.Expired()):
			n.State, n.Why = nodeUnreachable, "holds no lease any more and did not release its presence: killed, frozen or cut off from the database"
			if hasPresence {
				n.Since = p.ExpiresAt
			}
			continue
		}
		if len(n.Roles) == 0 {
			n.Roles = []string{"follower"}
		}
		n.State = nodeUnknown
		var line string
		var at time.Time
		if n.ThisNode && d.cfg.Readiness != nil {
			ready, l := d.cfg.Readiness()
			line = history.StatusLine(func() (bool, string) { return ready, l }, d.cfg.Version) // since: unknown
		} else if lookups < statusLookups && hasPresence {
			lookups++
			if es, err := d.cfg.Store.LeaseHistory(ctx, nodePrefix+h, 0, 1); err == nil && len(es) == 1 && es[0].Event == sqlstore.EventNodeStatus {
				line, at = es[0].Reason, es[0].At
			}
		}
		if line != "" {
			n.applyStatus(line, at)
		}
		if !n.ThisNode && n.session && alive != nil && !alive(h) {
			// It said it keeps a session, and the database no longer has it.
			n.State, n.Since = nodeUnreachable, time.Time{}
			n.Why = "its database session is gone: killed, or cut off from the database"
		}
	}
	out := make([]nodeRow, 0, len(all))
	for _, n := range all {
		out = append(out, *n)
	}
	// Trouble first.
	rank := map[string]int{nodeUnreachable: 0, nodeNotReady: 1, nodeUnknown: 2, nodeReady: 2, nodeStopped: 3}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if rank[a.State] != rank[b.State] {
			return rank[a.State] < rank[b.State]
		}
		return a.Holder < b.Holder
	})
	return out
}

// takenFrom reads the previous holder out of a taken_over event's reason
// (history.Recorder: "the lease of H (epoch N) expired without a release").
func takenFrom(reason string) string {
	rest, ok := strings.CutPrefix(reason, "the lease of ")
	if !ok {
		return ""
	}
	if i := strings.LastIndex(rest, " (epoch "); i > 0 {
		return rest[:i]
	}
	return ""
}

// applyStatus fills the row from a status record (history.StatusLine)
// written at at.
func (n *nodeRow) applyStatus(line string, at time.Time) {
	f := map[string]string{}
	for _, kv := range strings.Fields(line) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			f[k] = v
		}
	}
	n.Version, n.Durability, n.Since = f["version"], f["durability"], at
	n.session = f["session"] != ""
	if f["ready"] == "true" {
		n.State = nodeReady
		return
	}
	n.State, n.Why = nodeNotReady, readinessWhy(f)
}

// readinessWhy says in words why /readyz answered 503 (httpapi's readyz
// documents the reasons).
func readinessWhy(f map[string]string) string {
	words := func(s string) string { return strings.ReplaceAll(s, "_", " ") }
	switch r := f["reason"]; r {
	case "dispatch_failing":
		return "dispatch_failing: it leads but cannot build or refresh its schedule (it resigns unless that recovers): " + words(f["dispatch_error"])
	case "dispatch_stuck":
		return "dispatch_stuck: it leads but its dispatch loop has stopped turning (a statement hangs)"
	case "dispatch_starting":
		return "dispatch_starting: it leads and is building its schedule"
	case "singleton_stale":
		return "singleton_stale: singleton " + strings.ReplaceAll(f["singleton_stale"], ",", ", ") + " missed its heartbeats (the dead man's switch)"
	case "db_write_failed":
		return "db_write_failed: it reaches the database but cannot write its lease row: " + words(f["db_error"])
	case "db_unreachable":
		return "db_unreachable: it cannot reach the database"
	case "renew_deadline_missed":
		return "renew_deadline_missed: it believes it leads but missed its renew deadline"
	case "replication_not_synchronous":
		return "replication_not_synchronous: it refuses work because the database does not replicate synchronously"
	case "starting":
		return "starting: it has not reached the database yet"
	case "":
		if f["mode"] == "stopping" {
			return "stopping: it is shutting down"
		}
		return "not ready (mode " + f["mode"] + ")"
	default:
		return r
	}
}
