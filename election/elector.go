package election

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlease/sqlease"
)

// Elector competes for one lease and gates leader-only actions. Create it
// with New, run it with Run, and call Require/Ensure/Fenced from any goroutine.
type Elector struct {
	cfg Config
	log *slog.Logger
	obs sqlease.Observer
	// sessionLosses counts advisory sessions lost in a row (runAdvisory's
	// goroutine only), for the hint that names what was seen.
	sessionLosses int

	running      atomic.Bool
	missingSince time.Time          // Run's goroutine: when the lease row was first seen missing (Willing)
	wake         chan struct{}      // nudges a waiting follower to poll now
	lost         chan struct{}      // a failed fence tells the lead loop
	resigns      chan resignRequest // Resign tells the lead loop
	probing      sync.Mutex         // one Probe at a time

	mu           sync.Mutex
	tok          sqlease.Token      // zero while following
	trustedUntil time.Time          // local monotonic deadline of tok: leadership ends
	gateUntil    time.Time          // the gate is open until then (≤ trustedUntil)
	closedTok    sqlease.Token      // the last term that ended, and until when
	closedUntil  time.Time          // what it started may act (ActUntil)
	expiresAt    time.Time          // database expiry of tok's lease (diagnostics)
	cancelLead   context.CancelFunc // cancels the OnStartedLeading context
	entered      chan struct{}      // closed once this term's OnStartedLeading was entered
	observed     sqlease.Lease      // the last lease row seen (any holder)
	observedOK   bool
	lastErr      error
	lastContact  time.Time // local time of the last successful database call
	// settledAt is the local instant from which no earlier term's holder
	// can still be acting (see PriorTermsEnd); zero when that was so when
	// this term began.
	settledAt time.Time
	// writeErr is the outcome of the last attempt to write the lease row
	// (acquire, takeover, renew), nil after a success or a refusal because
	// another holder has it; writeFailingSince is when writes began failing.
	writeErr          error
	writeFailingSince time.Time
}

// resignRequest asks the lead loop to end the term of tok and stay a
// follower for a while (Resign).
type resignRequest struct {
	tok    sqlease.Token
	reason string
}

// Status is a snapshot of an Elector for health checks and diagnostics.
type Status struct {
	// Leading is true while the gate is open.
	Leading bool
	// Token is this instance's token while leading.
	Token sqlease.Token
	// HolderID is this instance's holder id.
	HolderID string
	// Leader is the last lease row observed (this instance's while leading).
	Leader sqlease.Lease
	// LeaderKnown is false until the lease row has been read once.
	LeaderKnown bool
	// TrustedUntil is the local deadline of the current token.
	TrustedUntil time.Time
	// LastError is the last database error seen, nil after a success.
	LastError error
	// LastContact is the local time of the last successful database call
	// (zero before the first); readiness checks use it to tell a database
	// that has been unreachable for too long.
	LastContact time.Time
	// WriteError is the error of the last attempt to write the lease row
	// (acquire, takeover or renew) while it keeps failing, nil otherwise;
	// WriteFailingSince is the local time writes began failing. A node that
	// can read its database but not write it (a read-only SQLite file, a
	// full disk) shows it here.
	WriteError        error
	WriteFailingSince time.Time
}

// New validates cfg and returns an Elector. The error joins one
// sqlease.ErrInvalidConfig error per broken rule.
func New(cfg Config) (*Elector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Elector{
		cfg:     cfg,
		log:     cfg.Logger.With(slog.String("lease_name", cfg.LeaseName), slog.String("holder_id", cfg.HolderID)),
		obs:     cfg.Observer,
		wake:    make(chan struct{}, 1),
		lost:    make(chan struct{}, 1),
		resigns: make(chan resignRequest, 1),
	}, nil
}

// HolderID returns this instance's holder id.
func (e *Elector) HolderID() string { return e.cfg.HolderID }

// LeaseName returns the lease name.
func (e *Elector) LeaseName() string { return e.cfg.LeaseName }

// Config returns the effective configuration, defaults applied.
func (e *Elector) Config() Config { return e.cfg }

// Run competes for the lease until ctx ends, then closes the gate, releases
// the lease if held and returns nil. It returns an error at once if the
// Elector is already running.
func (e *Elector) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("sqlease: elector is already running")
	}
	defer e.running.Store(false)
	if e.cfg.Changes != nil {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case _, ok := <-e.cfg.Changes:
					if !ok {
						return
					}
					e.Wake()
				}
			}
		}()
	}
	var callbacks sync.WaitGroup
	if e.cfg.SessionLocker != nil {
		e.runAdvisory(ctx, &callbacks)
		return nil
	}
	t := term{renew: e.cfg.Store.Renew, release: e.cfg.Store.Release}
	for ctx.Err() == nil {
		lease, sentAt, err := e.tryAcquire(ctx, 0)
		if err == nil {
			lease, sentAt, err = e.freshen(ctx, lease, sentAt, t)
		}
		if err == nil {
			resigned := e.lead(ctx, lease, sentAt, time.Time{}, &callbacks, t)
			// Never overlap two terms' callbacks in one process: the old
			// one was cancelled, wait for it before competing again.
			callbacks.Wait()
			if resigned {
				e.holdOff(ctx)
			}
			continue
		}
		e.sleep(ctx, e.followWait(lease, err))
	}
	return nil
}

// freshen renews a lease just acquired whose answer came more than a
// renew interval after it was sent (a slow or loaded database): the term's
// trust counts from the sending, so such a term would begin with most of
// it spent, and a run started then — a delivery of 1.5 s with 0.25 s of
// trust left — is cut off by the deadline while its receiver works on,
// and the next leader, taking the lease as soon as it expires, sent the
// same occurrence again while the first was still being processed (the
// fault suite, MariaDB under CI load: an acquire answered 1.3 s late). A
// renew that fails ends the term before it began: nothing acted under it,
// and the lease expires for whoever is next.
func (e *Elector) freshen(ctx context.Context, lease sqlease.Lease, sentAt time.Time, t term) (sqlease.Lease, time.Time, error) {
	if e.cfg.Clock.Now().Sub(sentAt) <= e.cfg.RenewInterval {
		return lease, sentAt, nil
	}
	tok := lease.Token()
	renewAt := e.cfg.Clock.Now()
	l, err := t.renew(ctx, tok, e.cfg.LeaseDuration)
	if err != nil {
		e.setErr(err)
		e.log.Warn("leader_acquired_late", slog.Int64("lease_epoch", tok.Epoch), slog.Duration("answer_after", renewAt.Sub(sentAt)),
			slog.String("error", err.Error()), slog.String("reason", "the renew after a late acquire failed: this term does not act"))
		return sqlease.Lease{}, time.Time{}, err
	}
	e.log.Info("leader_acquired_late", slog.Int64("lease_epoch", tok.Epoch), slog.Duration("answer_after", renewAt.Sub(sentAt)),
		slog.String("reason", "renewed before acting"))
	return l, renewAt, nil
}

// missingFor reports whether the lease row has been seen missing for at
// least d, counting from the first read that found none (Run's goroutine
// only).
func (e *Elector) missingFor(d time.Duration) bool {
	now := e.cfg.Clock.Now()
	if e.missingSince.IsZero() {
		e.missingSince = now
	}
	return now.Sub(e.missingSince) >= d
}

// holdOff keeps an instance that resigned out of the competition for
// ResignHoldoff, so that another one takes the lease over.
func (e *Elector) holdOff(ctx context.Context) {
	t := time.NewTimer(e.cfg.ResignHoldoff)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Resign ends this instance's term of tok as a graceful shutdown does —
// the gate closes, OnStartedLeading's context is cancelled and awaited (at
// most until the local deadline), the lease is released — and keeps the
// instance a follower for ResignHoldoff so that another instance can lead.
// Call it when leading is pointless here, e.g. the work leadership exists for
// cannot run (scheduler.Lead does so when its dispatcher fails). It does not
// wait; it does nothing if tok is not the current term.
func (e *Elector) Resign(tok sqlease.Token, reason string) {
	e.mu.Lock()
	cur := e.tok
	e.mu.Unlock()
	if cur.IsZero() || cur != tok {
		return
	}
	select {
	case e.resigns <- resignRequest{tok: tok, reason: reason}:
	default: // one is pending already
	}
}

// PriorTermsEnd returns the local monotonic instant from which no holder of
// a term before tok's can still be acting: its lease has expired in database
// time, so its gate has closed and its in-flight work was cancelled. It is
// the zero time when that was so when tok's term began (the lease was
// acquired after it expired) and when tok is not this instance's current
// term. An advisory takeover does not wait for the lease to expire; a work
// item interrupted under an earlier term must not be retried before this
// instant, or two sends of it could overlap while the first sender lives.
func (e *Elector) PriorTermsEnd(tok sqlease.Token) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tok != tok {
		return time.Time{}
	}
	return e.settledAt
}

// Wake makes a waiting follower poll the lease now (e.g. on a notification
// that the leader released it).
func (e *Elector) Wake() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// tryAcquire reads the lease and acquires it when missing or expired —
// expired for at least grace, in database time. On failure it returns the
// lease as observed (zero if unknown) and the reason; a lease not yet
// expired for grace is returned with ErrLeaseHeld and ExpiresAt moved on by
// grace, so that followWait polls again when it is due.
func (e *Elector) tryAcquire(ctx context.Context, grace time.Duration) (sqlease.Lease, time.Time, error) {
	cur, err := e.cfg.Store.Lease(ctx, e.cfg.LeaseName)
	if err == nil && e.cfg.Willing != nil && cur.Expired() && !e.cfg.Willing() {
		// Leave a free lease to a willing instance for a while.
		grace = max(grace, e.cfg.ReluctantFor)
	}
	switch {
	case errors.Is(err, sqlease.ErrNoLease):
		if grace > 0 || e.cfg.Willing != nil && !e.cfg.Willing() && !e.missingFor(e.cfg.ReluctantFor) {
			return sqlease.Lease{}, time.Time{}, sqlease.ErrLeaseHeld
		}
	case err != nil:
		e.setErr(err)
		if ctx.Err() == nil {
			e.log.Warn("leader_acquire_failed", slog.String("sql_error", err.Error()))
		}
		return sqlease.Lease{}, time.Time{}, err
	default:
		e.missingSince = time.Time{}
		e.setErr(nil)
		e.observe(cur)
		if !cur.Expired() {
			return cur, time.Time{}, sqlease.ErrLeaseHeld
		}
		if cur.ObservedAt.Sub(cur.ExpiresAt) < grace {
			cur.ExpiresAt = cur.ExpiresAt.Add(grace)
			return cur, time.Time{}, sqlease.ErrLeaseHeld
		}
	}

	sentAt := e.cfg.Clock.Now()
	lease, err := e.cfg.Store.Acquire(ctx, e.cfg.LeaseName, e.cfg.HolderID, e.cfg.LeaseDuration)
	took := e.cfg.Clock.Now().Sub(sentAt)
	e.obs.AcquireAttempted(e.cfg.LeaseName, took, err == nil, err)
	switch {
	case err == nil:
		e.setErr(nil)
		e.wrote(nil)
		return lease, sentAt, nil
	case errors.Is(err, sqlease.ErrLeaseHeld):
		e.setErr(nil)
		e.wrote(nil)
		e.log.Debug("leader_acquire_failed", slog.String("reason", "held"))
		return sqlease.Lease{}, time.Time{}, err
	default:
		e.setErr(err)
		e.wrote(err)
		if ctx.Err() == nil {
			e.log.Warn("leader_acquire_failed", slog.String("sql_error", err.Error()))
		}
		return sqlease.Lease{}, time.Time{}, err
	}
}

// followLag is how long after an observed expiry a follower with a change
// feed looks: a quarter of the acquire interval, at most 250 ms.
func (e *Elector) followLag() time.Duration {
	return min(e.cfg.AcquireInterval/4, 250*time.Millisecond)
}

// followWait is how long a follower waits before polling again: the jittered
// acquire interval, or less when the observed lease expires sooner.
func (e *Elector) followWait(cur sqlease.Lease, err error) time.Duration {
	d := e.cfg.AcquireInterval
	if j := e.cfg.AcquireJitter; j > 0 {
		d = time.Duration(float64(d) * (1 + j*(2*rand.Float64()-1)))
	}
	if errors.Is(err, sqlease.ErrLeaseHeld) && !cur.ExpiresAt.IsZero() {
		// Poll just after the expiry the database reported; the millisecond
		// covers the resolution of database timestamps.
		left := max(cur.Remaining()+time.Millisecond, time.Millisecond)
		if e.cfg.Changes != nil {
			// A release or a new holder wakes the follower (Wake): until
			// the lease it saw can expire, there is nothing to look at.
			// An idle fleet then reads the lease about once per lease
			// duration instead of every acquire interval.
			//
			// It looks a little after the expiry (followLag): a live
			// leader renews at about that moment (its renewals are
			// RenewInterval apart, and the expiry seen is a renewal's
			// plus LeaseDuration), and a read just before that renewal
			// lands sees an expiry only LeaseDuration-RenewInterval
			// ahead — a third more reads. A dead leader is noticed
			// followLag later, well within the acquire interval the
			// failover bound allows for.
			return min(left+e.followLag(), 60*e.cfg.AcquireInterval)
		}
		if left < d {
			d = left
		}
	}
	return d
}

func (e *Elector) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-e.wake:
	}
}

// term is how one term renews, notices a lost session and resigns: through
// the lease store in lease mode, through the session lock in advisory mode.
type term struct {
	renew   func(context.Context, sqlease.Token, time.Duration) (sqlease.Lease, error)
	release func(context.Context, sqlease.Token) error
	lost    <-chan struct{} // closed when the session lock is lost; nil in lease mode
}

// deadlines returns, for a renew sent at sentAt, the hard local deadline
// (the lease can no longer be trusted: leadership ends) and the gate's
// deadline. In advisory mode the gate closes earlier, when heartbeats are
// two intervals late, and re-opens if a later heartbeat succeeds.
func (e *Elector) deadlines(sentAt time.Time) (trusted, gate time.Time) {
	trusted = sentAt.Add(e.cfg.LeaseDuration - e.cfg.SafetyMargin)
	gate = trusted
	if e.cfg.SessionLocker != nil {
		if g := sentAt.Add(2 * e.cfg.RenewInterval); g.Before(trusted) {
			gate = g
		}
	}
	return trusted, gate
}

// lead holds the lease until it is lost, ctx ends or the term is resigned;
// it reports the last. settledAt is the term's PriorTermsEnd.
func (e *Elector) lead(ctx context.Context, lease sqlease.Lease, sentAt, settledAt time.Time, callbacks *sync.WaitGroup, t term) (resigned bool) {
	tok := lease.Token()
	leadCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Drain stale fence-failure and resign signals from an earlier term.
	select {
	case <-e.lost:
	default:
	}
	select {
	case <-e.resigns:
	default:
	}
	trusted, gate := e.deadlines(sentAt)
	e.mu.Lock()
	e.tok, e.trustedUntil, e.gateUntil, e.expiresAt, e.cancelLead = tok, trusted, gate, lease.ExpiresAt, cancel
	e.settledAt = settledAt
	e.mu.Unlock()
	e.observe(lease)

	// Cancels the leading context when the local deadline passes without a
	// renewal; reset after every successful renew.
	deadline := time.AfterFunc(trusted.Sub(e.cfg.Clock.Now()), cancel)
	defer deadline.Stop()

	attrs := []any{slog.Int64("lease_epoch", tok.Epoch), slog.Time("expires_at", lease.ExpiresAt)}
	if !settledAt.IsZero() {
		attrs = append(attrs, slog.Duration("prior_terms_end_in", settledAt.Sub(e.cfg.Clock.Now())))
	}
	e.log.Info("leader_acquired", attrs...)
	e.obs.LeadershipChanged(e.cfg.LeaseName, true, tok.Epoch)
	// OnStoppedLeading must not overtake OnStartedLeading: stopped() waits
	// until this term's callback has been entered.
	entered := make(chan struct{})
	e.mu.Lock()
	e.entered = entered
	e.mu.Unlock()
	if f := e.cfg.OnStartedLeading; f != nil {
		callbacks.Add(1)
		go func() {
			defer callbacks.Done()
			close(entered)
			f(leadCtx, tok)
		}()
	} else {
		close(entered)
	}

	renew := time.NewTimer(e.cfg.RenewInterval)
	defer renew.Stop()
	for {
		select {
		case <-ctx.Done():
			e.resign(ctx, tok, callbacks, t, "shutdown")
			return false
		case r := <-e.resigns:
			if r.tok != tok {
				continue
			}
			e.resign(ctx, tok, callbacks, t, r.reason)
			return true
		case <-e.lost:
			e.drop(tok, "fence failed", nil)
			return false
		case <-t.lost:
			e.drop(tok, "session lock lost", nil)
			return false
		case <-leadCtx.Done():
			// Cancelled by the parent (shutdown), a failed fence or the
			// deadline: tell them apart.
			select {
			case <-ctx.Done():
				e.resign(ctx, tok, callbacks, t, "shutdown")
			case <-e.lost:
				e.drop(tok, "fence failed", nil)
			default:
				e.drop(tok, "local deadline passed without a successful renew", nil)
			}
			return false
		case <-renew.C:
		}
		sentAt := e.cfg.Clock.Now()
		until := e.trustDeadline(tok)
		if !sentAt.Before(until) {
			e.drop(tok, "local deadline passed without a successful renew", nil)
			return false
		}
		rctx, rcancel := context.WithDeadline(ctx, until)
		l, err := t.renew(rctx, tok, e.cfg.LeaseDuration)
		rcancel()
		e.obs.Renewed(e.cfg.LeaseName, e.cfg.Clock.Now().Sub(sentAt), err)
		if err != nil {
			if ctx.Err() != nil {
				continue // shutting down: resign on the next turn
			}
			e.setErr(err)
			if !errors.Is(err, sqlease.ErrLeaseLost) && !errors.Is(err, sqlease.ErrSessionLost) {
				e.wrote(err)
			}
			e.log.Error("leader_renew_failed", slog.Int64("lease_epoch", tok.Epoch), slog.String("sql_error", err.Error()))
			e.drop(tok, "renew failed", err)
			return false
		}
		trusted, gate := e.deadlines(sentAt)
		if !deadline.Stop() {
			// The deadline fired while the renew was in flight: the callback's
			// context is already cancelled, so this term is over.
			e.drop(tok, "local deadline passed during renew", nil)
			return false
		}
		deadline.Reset(trusted.Sub(e.cfg.Clock.Now()))
		e.mu.Lock()
		if e.tok == tok {
			e.trustedUntil, e.gateUntil, e.expiresAt = trusted, gate, l.ExpiresAt
		}
		e.mu.Unlock()
		e.setErr(nil)
		e.wrote(nil)
		e.observe(l)
		e.log.Debug("leader_renewed", slog.Int64("lease_epoch", tok.Epoch), slog.Time("expires_at", l.ExpiresAt))
		renew.Reset(e.cfg.RenewInterval)
	}
}

func (e *Elector) trustDeadline(tok sqlease.Token) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tok != tok {
		return time.Time{}
	}
	return e.trustedUntil
}

// closeGate closes the gate for tok, if still open, and cancels its context.
// It reports whether it closed it.
func (e *Elector) closeGate(tok sqlease.Token) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tok != tok || tok.IsZero() {
		return false
	}
	e.closedTok, e.closedUntil = tok, e.trustedUntil
	e.tok, e.trustedUntil, e.gateUntil = sqlease.Token{}, time.Time{}, time.Time{}
	if e.cancelLead != nil {
		e.cancelLead()
		e.cancelLead = nil
	}
	return true
}

// drop ends a term that was lost.
func (e *Elector) drop(tok sqlease.Token, reason string, cause error) {
	if e.closeGate(tok) && (e.cfg.SessionLocker != nil || cause == nil) {
		// Lost for good: a takeover may act already (advisory mode, a
		// failed fence, the deadline passed).
		e.mu.Lock()
		e.closedUntil = e.cfg.Clock.Now()
		e.mu.Unlock()
	}
	attrs := []any{slog.Int64("lease_epoch", tok.Epoch), slog.String("reason", reason)}
	if cause != nil {
		attrs = append(attrs, slog.String("sql_error", cause.Error()))
	}
	e.log.Warn("leader_lost", attrs...)
	e.stopped(tok)
}

// resign ends a term on shutdown or Resign: close the gate, let the
// callback finish (at most until the local deadline), then release so a
// follower takes over at once.
func (e *Elector) resign(ctx context.Context, tok sqlease.Token, callbacks *sync.WaitGroup, t term, reason string) {
	until := e.trustDeadline(tok)
	e.closeGate(tok)
	done := make(chan struct{})
	go func() { callbacks.Wait(); close(done) }()
	wait := time.NewTimer(max(until.Sub(e.cfg.Clock.Now()), 0))
	defer wait.Stop()
	select {
	case <-done:
	case <-wait.C:
		// Still running: releasing now could let a new leader act beside it.
		// The lease will expire by itself.
		e.log.Warn("leader_lost", slog.Int64("lease_epoch", tok.Epoch),
			slog.String("reason", reason+": leading callback did not return before the local deadline; lease left to expire"))
		e.stopped(tok)
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.ReleaseTimeout)
	defer cancel()
	err := t.release(rctx, tok)
	switch {
	case err == nil:
		e.log.Info("leader_released", slog.Int64("lease_epoch", tok.Epoch), slog.String("reason", reason))
	case errors.Is(err, sqlease.ErrLeaseLost):
		e.log.Info("leader_released", slog.Int64("lease_epoch", tok.Epoch), slog.String("reason", reason+"; lease had already expired"))
	default:
		e.log.Warn("leader_release_failed", slog.Int64("lease_epoch", tok.Epoch), slog.String("sql_error", err.Error()))
	}
	e.stopped(tok)
}

func (e *Elector) stopped(tok sqlease.Token) {
	e.mu.Lock()
	entered := e.entered
	e.mu.Unlock()
	if entered != nil {
		<-entered
	}
	e.obs.LeadershipChanged(e.cfg.LeaseName, false, tok.Epoch)
	if f := e.cfg.OnStoppedLeading; f != nil {
		f(tok)
	}
}

func (e *Elector) observe(l sqlease.Lease) {
	e.mu.Lock()
	changed := !e.observedOK || e.observed.Holder != l.Holder || e.observed.Epoch != l.Epoch
	e.observed, e.observedOK = l, true
	e.mu.Unlock()
	if changed {
		e.log.Info("leader_observed", slog.String("leader_holder_id", l.Holder), slog.Int64("lease_epoch", l.Epoch), slog.Time("expires_at", l.ExpiresAt))
		if f := e.cfg.OnNewLeader; f != nil {
			f(l.Holder, l.Epoch)
		}
	}
}

// setErr records the outcome of a database call: nil marks contact.
func (e *Elector) setErr(err error) {
	e.mu.Lock()
	e.lastErr = err
	if err == nil {
		e.lastContact = e.cfg.Clock.Now()
	}
	e.mu.Unlock()
}

// wrote records the outcome of an attempt to write the lease row.
func (e *Elector) wrote(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.writeErr = err
	switch {
	case err == nil:
		e.writeFailingSince = time.Time{}
	case e.writeFailingSince.IsZero():
		e.writeFailingSince = e.cfg.Clock.Now()
	}
}

// Probe reads the lease row once, so that the last database contact is
// fresh however rarely this instance happens to query (an advisory
// follower blocked on its session lock sends nothing). Concurrent calls
// share one read.
func (e *Elector) Probe(ctx context.Context) error {
	if !e.probing.TryLock() {
		e.probing.Lock() // one in flight: wait for it instead
		e.probing.Unlock()
		return nil
	}
	defer e.probing.Unlock()
	l, err := e.cfg.Store.Lease(ctx, e.cfg.LeaseName)
	switch {
	case err == nil:
		e.setErr(nil)
		e.observe(l)
		return nil
	case errors.Is(err, sqlease.ErrNoLease):
		e.setErr(nil)
		return nil
	default:
		e.setErr(err)
		return err
	}
}

// Require is the acting gate: it returns the current token while this
// instance leads and its local deadline has not passed, and ErrNotLeader
// otherwise — without a database round trip. It returns ctx's error if ctx
// has ended.
func (e *Elector) Require(ctx context.Context) (sqlease.Token, error) {
	if err := ctx.Err(); err != nil {
		return sqlease.Token{}, err
	}
	now := e.cfg.Clock.Now()
	e.mu.Lock()
	tok, until := e.tok, e.gateUntil
	e.mu.Unlock()
	if tok.IsZero() || !now.Before(until) {
		e.obs.Blocked(e.cfg.LeaseName)
		return sqlease.Token{}, sqlease.ErrNotLeader
	}
	return tok, nil
}

// Ensure is the just-in-time check before an irreversible step: it returns
// nil only if tok is still this instance's current token and its local
// deadline has not passed, and an error wrapping ErrNotLeader otherwise.
func (e *Elector) Ensure(tok sqlease.Token) error {
	now := e.cfg.Clock.Now()
	e.mu.Lock()
	cur, until := e.tok, e.gateUntil
	e.mu.Unlock()
	if cur.IsZero() || cur != tok || !now.Before(until) {
		e.obs.Blocked(e.cfg.LeaseName)
		return fmt.Errorf("token %s: %w", tok, sqlease.ErrNotLeader)
	}
	return nil
}

// ActUntil returns the local instant by which whatever tok's term started
// outside this process (a child process) must have stopped — stopped from
// outside should this process be frozen (the daemon's guard): while the
// term lasts its trusted deadline, moving on with each renew; once it
// ended gracefully (shutdown, Resign) the deadline it had then, which the
// elector waits out before the lease may pass on; once it was lost, the
// moment it was lost — but for a renew that failed in lease mode, whose
// lease nobody can take before that deadline. false: tok is neither the
// current term nor the last one.
func (e *Elector) ActUntil(tok sqlease.Token) (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case tok.IsZero():
		return time.Time{}, false
	case e.tok == tok:
		return e.trustedUntil, true
	case e.closedTok == tok:
		return e.closedUntil, true
	}
	return time.Time{}, false
}

// Fenced runs fn in a transaction fenced by tok (see sqlease.LeaseStore.Fenced)
// after checking the gate. It returns an error wrapping ErrNotLeader when the
// gate is closed for tok, and ErrFenceFailed (an ErrLeaseLost) when the
// database fence fails — in which case leadership is dropped at once. An
// error of fn's own writes is returned as is and costs no leadership.
func (e *Elector) Fenced(ctx context.Context, tok sqlease.Token, fn func(*sql.Tx) error) error {
	if err := e.Ensure(tok); err != nil {
		return err
	}
	err := e.cfg.Store.Fenced(ctx, tok, fn)
	// Only the fence's own failure says the lease is lost; an error of
	// fn's writes (a job deleted under its run, bad bytes in one row)
	// belongs to that write alone.
	if errors.Is(err, sqlease.ErrFenceFailed) {
		if e.closeGate(tok) {
			select {
			case e.lost <- struct{}{}:
			default:
			}
		}
	}
	return err
}

// LeaseStore returns the store whose leases the elector holds, the one
// Fenced fences by (Config.Store).
func (e *Elector) LeaseStore() sqlease.LeaseStore { return e.cfg.Store }

// IsLeader reports whether the gate is open now.
func (e *Elector) IsLeader() bool {
	_, err := e.Require(context.Background())
	return err == nil
}

// Status returns a snapshot for health checks and diagnostics.
func (e *Elector) Status() Status {
	now := e.cfg.Clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	return Status{
		Leading:      !e.tok.IsZero() && now.Before(e.gateUntil),
		Token:        e.tok,
		HolderID:     e.cfg.HolderID,
		Leader:       e.observed,
		LeaderKnown:  e.observedOK,
		TrustedUntil: e.trustedUntil,
		LastError:    e.lastErr,
		LastContact:  e.lastContact,

		WriteError:        e.writeErr,
		WriteFailingSince: e.writeFailingSince,
	}
}

// Healthy returns an error when this instance believes it leads (its gate was
// opened and not closed) but its local deadline has passed without a renew —
// the condition /healthz reports as 503.
func (e *Elector) Healthy() error {
	now := e.cfg.Clock.Now()
	e.mu.Lock()
	tok, until := e.tok, e.gateUntil
	e.mu.Unlock()
	if !tok.IsZero() && !now.Before(until) {
		return fmt.Errorf("sqlease: leader %s missed its renew deadline by %s", tok, now.Sub(until))
	}
	return nil
}
