package scheduler

import (
	"fmt"
	"math"
	"time"

	"github.com/sqlease/sqlease"
)

// Retry policy defaults and bounds. A zero sqlease.Retry means
// DefaultMaxAttempts attempts per occurrence with DefaultRetryBackoff.
const (
	// DefaultMaxAttempts is the number of attempts per occurrence when
	// Retry.MaxAttempts is 0: the first attempt and two retries.
	DefaultMaxAttempts = 3
	// MaxRetryAttempts is the largest Retry.MaxAttempts ValidateRetry accepts.
	MaxRetryAttempts = 100
	// DefaultRetryBackoff is the base delay when Retry.Backoff is 0.
	DefaultRetryBackoff = time.Second
	// MaxRetryBackoff is the largest Retry.Backoff ValidateRetry accepts.
	MaxRetryBackoff = 24 * time.Hour
	// MaxRetryDelay caps the exponential growth of the delay between
	// attempts; a Backoff larger than it is used as the cap instead, so the
	// first retry always waits about Backoff.
	MaxRetryDelay = time.Hour
)

// ValidateRetry checks a job's retry policy. It returns an error wrapping
// sqlease.ErrInvalidConfig that names retry.max_attempts unless MaxAttempts
// is 0 (DefaultMaxAttempts) or in 1..MaxRetryAttempts, and retry.backoff
// unless Backoff is in 0..MaxRetryBackoff (0 means DefaultRetryBackoff).
func ValidateRetry(r sqlease.Retry) error {
	if r.MaxAttempts < 0 || r.MaxAttempts > MaxRetryAttempts {
		return fmt.Errorf("%w: retry.max_attempts must be between 1 and %d, got %d", sqlease.ErrInvalidConfig, MaxRetryAttempts, r.MaxAttempts)
	}
	if r.Backoff < 0 || r.Backoff > MaxRetryBackoff {
		return fmt.Errorf("%w: retry.backoff must be between 0s and %s, got %s", sqlease.ErrInvalidConfig, MaxRetryBackoff, r.Backoff)
	}
	return nil
}

// RetryMaxAttempts returns the number of attempts r allows per occurrence:
// r.MaxAttempts, or DefaultMaxAttempts when it is 0 or less.
func RetryMaxAttempts(r sqlease.Retry) int {
	if r.MaxAttempts <= 0 {
		return DefaultMaxAttempts
	}
	return r.MaxAttempts
}

// ShouldRetry reports whether an occurrence whose attempt-th attempt (1, 2,
// …) has just failed gets another attempt: attempt < RetryMaxAttempts(r).
func ShouldRetry(r sqlease.Retry, attempt int) bool {
	return attempt < RetryMaxAttempts(r)
}

// Backoff returns the delay before attempt+1 after attempt (1, 2, …) failed.
// The base delay is Backoff×2^(attempt-1) (Backoff 0 means
// DefaultRetryBackoff; attempt < 1 counts as 1), capped at the larger of
// MaxRetryDelay and Backoff. It applies "equal jitter": the result is
// base/2 + rnd×base/2, with rnd in [0, 1) from the caller (clamped), so a
// retry always waits at least half the base — unlike full jitter, which
// could retry at once — while a fleet of failing jobs still spreads out.
func Backoff(r sqlease.Retry, attempt int, rnd float64) time.Duration {
	base := r.Backoff
	if base <= 0 {
		base = DefaultRetryBackoff
	}
	limit := max(MaxRetryDelay, base)
	d := base
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2 // d < limit ≤ MaxRetryBackoff, so this cannot overflow
	}
	d = min(d, limit)
	switch {
	case rnd < 0 || math.IsNaN(rnd):
		rnd = 0
	case rnd >= 1:
		rnd = 1
	}
	half := d / 2
	return half + time.Duration(rnd*float64(d-half))
}
