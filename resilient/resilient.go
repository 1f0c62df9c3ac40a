// Package resilient adapts failsafe-go to sqlease: it wraps a LeaseStore so
// that transient database errors (those wrapping sqlease.ErrTransient —
// connection loss, deadlocks, serialization failures, Azure SQL throttling)
// are retried with exponential backoff and jitter, behind a circuit breaker
// that fails calls fast during a long outage instead of piling them on a
// struggling database.
//
// Retries never outlive the caller's context. The elector gives every renew
// the lease's local safety deadline as its context deadline, so a retried
// renew can never stretch trust in the lease: when the deadline comes, the
// renew fails and leadership is dropped, as without retries.
//
// Only idempotent calls are retried: Renew, Release, Lease and Leases; Renew
// with a deadline is retried until that deadline and bypasses the breaker.
// Acquire is not (a lost reply to a committed acquire would make the retry
// see the lease held, by this very holder, until it expires; the elector's
// next poll is the better retry), and Fenced is not (a lost reply to a commit
// would run the caller's fn twice). Both still count towards the breaker.
package resilient

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/retrypolicy"

	"github.com/sqlease/sqlease"
)

// Defaults.
const (
	DefaultMaxRetries       = 3
	DefaultBaseDelay        = 25 * time.Millisecond
	DefaultMaxDelay         = time.Second
	DefaultBreakerThreshold = 8
	// One trial call a second during an outage costs the database
	// nothing, and a node whose breaker opened as a short restart ended
	// is back within a second: at 5 s, a singleton of the fault suite ran
	// again 7 s after a database restart of 0.7 s.
	DefaultBreakerDelay = time.Second
)

// ErrCircuitOpen is wrapped (with sqlease.ErrTransient) by calls refused
// while the circuit breaker is open.
var ErrCircuitOpen = errors.New("sqlease: database circuit breaker open")

// Config configures Wrap. Zero fields take the defaults.
type Config struct {
	// MaxRetries is how many times a transient failure is retried.
	MaxRetries int
	// BaseDelay and MaxDelay bound the exponential backoff; each delay is
	// jittered by ±25 %.
	BaseDelay, MaxDelay time.Duration
	// BreakerThreshold consecutive transient failures open the breaker for
	// BreakerDelay; then one trial call decides whether it closes.
	BreakerThreshold uint
	BreakerDelay     time.Duration
	// Logger receives breaker state changes; nil discards.
	Logger *slog.Logger
}

// Store is a LeaseStore with retries and a circuit breaker.
type Store struct {
	next    sqlease.LeaseStore
	retry   retrypolicy.RetryPolicy[any]
	renew   retrypolicy.RetryPolicy[any] // until the context's deadline
	breaker circuitbreaker.CircuitBreaker[any]
}

var _ sqlease.LeaseStore = (*Store)(nil)

func transient(_ any, err error) bool {
	return err != nil && errors.Is(err, sqlease.ErrTransient) && !errors.Is(err, ErrCircuitOpen)
}

// Wrap returns next with retries and a circuit breaker.
func Wrap(next sqlease.LeaseStore, cfg Config) *Store {
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = DefaultMaxRetries
	}
	if cfg.BaseDelay == 0 {
		cfg.BaseDelay = DefaultBaseDelay
	}
	if cfg.MaxDelay == 0 {
		cfg.MaxDelay = DefaultMaxDelay
	}
	if cfg.BreakerThreshold == 0 {
		cfg.BreakerThreshold = DefaultBreakerThreshold
	}
	if cfg.BreakerDelay == 0 {
		cfg.BreakerDelay = DefaultBreakerDelay
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{
		next: next,
		retry: retrypolicy.NewBuilder[any]().
			HandleIf(transient).
			WithMaxRetries(cfg.MaxRetries).
			WithBackoff(cfg.BaseDelay, cfg.MaxDelay).
			WithJitterFactor(0.25).
			ReturnLastFailure().
			Build(),
		renew: retrypolicy.NewBuilder[any]().
			HandleIf(transient).
			WithMaxRetries(-1).
			WithBackoff(cfg.BaseDelay, min(cfg.MaxDelay, 250*time.Millisecond)).
			WithJitterFactor(0.25).
			ReturnLastFailure().
			Build(),
		breaker: circuitbreaker.NewBuilder[any]().
			HandleIf(transient).
			WithFailureThreshold(cfg.BreakerThreshold).
			WithDelay(cfg.BreakerDelay).
			OnStateChanged(func(e circuitbreaker.StateChangedEvent) {
				log.Warn("database_circuit_breaker", slog.String("from", e.OldState.String()), slog.String("to", e.NewState.String()))
			}).
			Build(),
	}
}

// BreakerOpen reports whether the breaker is refusing calls now.
func (s *Store) BreakerOpen() bool { return s.breaker.IsOpen() }

// call runs fn under the breaker, retried when retry is set.
func (s *Store) call(ctx context.Context, retry bool, fn func() (any, error)) (any, error) {
	exec := failsafe.With[any](s.breaker)
	if retry {
		exec = failsafe.With[any](s.retry, s.breaker)
	}
	v, err := exec.WithContext(ctx).Get(fn)
	if errors.Is(err, circuitbreaker.ErrOpen) {
		return nil, fmt.Errorf("%w: %w", sqlease.ErrTransient, ErrCircuitOpen)
	}
	return v, err
}

func lease(v any, err error) (sqlease.Lease, error) {
	if err != nil {
		return sqlease.Lease{}, err
	}
	return v.(sqlease.Lease), nil
}

// Acquire implements sqlease.LeaseStore (breaker only).
func (s *Store) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (sqlease.Lease, error) {
	return lease(s.call(ctx, false, func() (any, error) { return s.next.Acquire(ctx, name, holder, ttl) }))
}

// Renew implements sqlease.LeaseStore: retried, as often as its context's
// deadline allows (the elector sets the lease's safety deadline), and not
// subject to the breaker — it is the leader's lifeline, and its deadline
// already bounds it.
func (s *Store) Renew(ctx context.Context, tok sqlease.Token, ttl time.Duration) (sqlease.Lease, error) {
	if _, ok := ctx.Deadline(); !ok {
		return lease(s.call(ctx, true, func() (any, error) { return s.next.Renew(ctx, tok, ttl) }))
	}
	return lease(failsafe.With[any](s.renew).WithContext(ctx).Get(func() (any, error) { return s.next.Renew(ctx, tok, ttl) }))
}

// Release implements sqlease.LeaseStore (retried within ctx).
func (s *Store) Release(ctx context.Context, tok sqlease.Token) error {
	_, err := s.call(ctx, true, func() (any, error) { return nil, s.next.Release(ctx, tok) })
	return err
}

// Lease implements sqlease.LeaseStore (retried within ctx).
func (s *Store) Lease(ctx context.Context, name string) (sqlease.Lease, error) {
	return lease(s.call(ctx, true, func() (any, error) { return s.next.Lease(ctx, name) }))
}

// Leases implements sqlease.LeaseStore (retried within ctx).
func (s *Store) Leases(ctx context.Context) ([]sqlease.Lease, error) {
	v, err := s.call(ctx, true, func() (any, error) { return s.next.Leases(ctx) })
	if err != nil {
		return nil, err
	}
	return v.([]sqlease.Lease), nil
}

// Unwrap returns the store s wraps.
func (s *Store) Unwrap() sqlease.LeaseStore { return s.next }

// Fenced implements sqlease.LeaseStore (breaker only).
func (s *Store) Fenced(ctx context.Context, tok sqlease.Token, fn func(*sql.Tx) error) error {
	_, err := s.call(ctx, false, func() (any, error) { return nil, s.next.Fenced(ctx, tok, fn) })
	return err
}
