package singleton

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// term is one assignment of a singleton to this node, under one generation
// and one term of the member lease: the body runs within it.
type term struct {
	tok    sqlease.Token // LeasePrefix + name, this node, the generation
	mtok   sqlease.Token // the member lease's term it runs under
	ctx    context.Context
	stop   context.CancelFunc // ends the body's context
	closed atomic.Bool        // the gate: closed on a loss, never reopened
	done   chan struct{}      // closed when runTerm has returned
	// first is the term's first start when the placement loop recorded
	// it in a batch (placer.startBatch), nil when runTerm records it.
	// Set before runTerm starts; read by it alone.
	first *firstStart
}

// firstStart is a start recorded by a batch: the saved state read with
// it, or that the database refused it.
type firstStart struct {
	state   []byte
	refused bool
}

// gateOpen reports whether the term may act: not lost, and the member
// lease trusted (its local deadline not passed).
func (t *term) gateOpen(n *Node) bool {
	return !t.closed.Load() && n.member.Ensure(t.mtok) == nil
}

// write runs one of the term's fenced writes after checking the gate; a
// refusal by the database (the assignment moved, or the member lease is
// not live in database time) closes the gate at once and ends the body.
func (t *term) write(ctx context.Context, n *Node, fn func(context.Context) error) error {
	if t.closed.Load() {
		return fmt.Errorf("singleton under %s: the term is over: %w", t.tok, sqlease.ErrLeaseLost)
	}
	if err := n.member.Ensure(t.mtok); err != nil {
		return fmt.Errorf("singleton under %s: %w: %w", t.tok, sqlease.ErrLeaseLost, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// Once sent, a write is seen through — not cut short by ctx (a body
	// stopped gracefully mid-Save) — until the member lease's local
	// deadline: one statement in autocommit, cancelled after the server had
	// run it, would have answered an error for a save that was kept.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(t.actUntil(n).Sub(n.cfg.Clock.Now()), 0))
	defer cancel()
	err := fn(wctx)
	if errors.Is(err, sqlease.ErrLeaseLost) {
		t.lose()
		n.dirty.Store(true) // read the assignments at the next reading
	}
	return err
}

// lose ends the term as a loss: the gate closes first, then the body's
// context ends.
func (t *term) lose() {
	t.closed.Store(true)
	t.stop()
}

// actUntil is the local instant by which what the term started must have
// stopped: the member lease's local deadline while the gate is open, the
// zero time once the term is lost.
func (t *term) actUntil(n *Node) time.Time {
	if t.closed.Load() {
		return time.Time{}
	}
	at, ok := n.member.ActUntil(t.mtok)
	if !ok {
		return time.Time{}
	}
	return at
}

// stopBody stops the body of t gracefully and waits until it has returned,
// at most e.stopTimeout. The member lease is renewed and the gate stays
// open meanwhile, so the body's last saves are accepted (and fenced) until
// it returns. A term lost meanwhile ends the wait as it ends the body;
// past the stop timeout the gate closes.
func (e *entry) stopBody(log *slog.Logger, t *term) {
	t.stop()
	wait := time.NewTimer(e.stopTimeout)
	defer wait.Stop()
	select {
	case <-t.done:
	case <-wait.C:
		t.lose()
		log.Warn("singleton_stop_timeout", slog.String("singleton", e.name), slog.Int64("lease_epoch", t.tok.Epoch),
			slog.Duration("stop_timeout", e.stopTimeout),
			slog.String("hint", "the body did not return within its stop timeout after its context ended; the gate closes now"))
	}
}

// memberStore is the lease store of the member lease's elector: its
// renewals are Store.RenewMember, one statement on every dialect (on MySQL
// and MariaDB Renew is a transaction of four: BEGIN, the write, a read,
// COMMIT — 7.7 statements/s for an idle fleet of 3 where the protocol
// needs 3), retried on a transient error until the elector's deadline for
// the renew (its context), as a resilient store would. The lease returned
// carries only the token: the elector's deadline runs from the renew's send
// time, not from the expiry the database computed.
type memberStore struct {
	sqlease.LeaseStore
	st *sqlstore.Store
}

func (m memberStore) Renew(ctx context.Context, tok sqlease.Token, ttl time.Duration) (sqlease.Lease, error) {
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		err := m.st.RenewMember(ctx, tok, ttl)
		if err == nil {
			return sqlease.Lease{Name: tok.Name, Holder: tok.Holder, Epoch: tok.Epoch}, nil
		}
		if !errors.Is(err, sqlease.ErrTransient) {
			return sqlease.Lease{}, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return sqlease.Lease{}, err
		case <-t.C:
		}
	}
}
