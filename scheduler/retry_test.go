package scheduler_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
)

func TestBackoff(t *testing.T) {
	const almostOne = 0.9999999999
	for _, tc := range []struct {
		name    string
		r       sqlease.Retry
		attempt int
		rnd     float64
		want    time.Duration
	}{
		{"default base, least jitter", sqlease.Retry{}, 1, 0, scheduler.DefaultRetryBackoff / 2},
		{"first retry, least", sqlease.Retry{Backoff: time.Second}, 1, 0, 500 * time.Millisecond},
		{"first retry, middle", sqlease.Retry{Backoff: time.Second}, 1, 0.5, 750 * time.Millisecond},
		{"second retry doubles", sqlease.Retry{Backoff: time.Second}, 2, 0, time.Second},
		{"third retry", sqlease.Retry{Backoff: time.Second}, 3, 0, 2 * time.Second},
		{"tenth retry", sqlease.Retry{Backoff: time.Second}, 10, 0, 256 * time.Second},
		{"capped", sqlease.Retry{Backoff: time.Second}, 13, 0, scheduler.MaxRetryDelay / 2},
		{"capped, full", sqlease.Retry{Backoff: time.Second}, 13, 1, scheduler.MaxRetryDelay},
		{"no overflow at 100", sqlease.Retry{Backoff: scheduler.MaxRetryBackoff}, 100, 0, scheduler.MaxRetryBackoff / 2},
		{"large backoff is its own cap", sqlease.Retry{Backoff: 2 * time.Hour}, 5, 0, time.Hour},
		{"attempt 0 counts as 1", sqlease.Retry{Backoff: time.Second}, 0, 0, 500 * time.Millisecond},
		{"negative attempt counts as 1", sqlease.Retry{Backoff: time.Second}, -4, 0, 500 * time.Millisecond},
		{"negative rnd clamps", sqlease.Retry{Backoff: time.Second}, 1, -3, 500 * time.Millisecond},
		{"NaN rnd clamps", sqlease.Retry{Backoff: time.Second}, 1, math.NaN(), 500 * time.Millisecond},
		{"rnd above 1 clamps", sqlease.Retry{Backoff: time.Second}, 1, 7, time.Second},
	} {
		if got := scheduler.Backoff(tc.r, tc.attempt, tc.rnd); got != tc.want {
			t.Errorf("%s: Backoff(%+v, %d, %v) = %s, want %s", tc.name, tc.r, tc.attempt, tc.rnd, got, tc.want)
		}
	}
	// Equal jitter: always within [base/2, base).
	for attempt := 1; attempt <= 20; attempt++ {
		base := min(time.Second<<(attempt-1), scheduler.MaxRetryDelay)
		for _, rnd := range []float64{0, 0.1, 0.5, 0.9, almostOne} {
			got := scheduler.Backoff(sqlease.Retry{Backoff: time.Second}, attempt, rnd)
			if got < base/2 || got >= base {
				t.Errorf("attempt %d rnd %v: %s outside [%s, %s)", attempt, rnd, got, base/2, base)
			}
		}
	}
}

func TestShouldRetry(t *testing.T) {
	for _, tc := range []struct {
		r       sqlease.Retry
		attempt int
		want    bool
	}{
		{sqlease.Retry{}, 1, true},
		{sqlease.Retry{}, scheduler.DefaultMaxAttempts - 1, true},
		{sqlease.Retry{}, scheduler.DefaultMaxAttempts, false},
		{sqlease.Retry{MaxAttempts: 1}, 1, false},
		{sqlease.Retry{MaxAttempts: 5}, 4, true},
		{sqlease.Retry{MaxAttempts: 5}, 5, false},
		{sqlease.Retry{MaxAttempts: 5}, 6, false},
	} {
		if got := scheduler.ShouldRetry(tc.r, tc.attempt); got != tc.want {
			t.Errorf("ShouldRetry(%+v, %d) = %t, want %t", tc.r, tc.attempt, got, tc.want)
		}
	}
	if scheduler.DefaultMaxAttempts != 3 {
		t.Errorf("DefaultMaxAttempts = %d, the documented default is 3", scheduler.DefaultMaxAttempts)
	}
	if got := scheduler.RetryMaxAttempts(sqlease.Retry{}); got != scheduler.DefaultMaxAttempts {
		t.Errorf("RetryMaxAttempts(zero) = %d", got)
	}
}

func TestValidateRetry(t *testing.T) {
	for _, r := range []sqlease.Retry{
		{}, {MaxAttempts: 1}, {MaxAttempts: scheduler.MaxRetryAttempts}, {Backoff: scheduler.MaxRetryBackoff}, {MaxAttempts: 3, Backoff: time.Second},
	} {
		if err := scheduler.ValidateRetry(r); err != nil {
			t.Errorf("ValidateRetry(%+v) = %v", r, err)
		}
	}
	for _, tc := range []struct {
		r     sqlease.Retry
		field string
	}{
		{sqlease.Retry{MaxAttempts: -1}, "retry.max_attempts"},
		{sqlease.Retry{MaxAttempts: scheduler.MaxRetryAttempts + 1}, "retry.max_attempts"},
		{sqlease.Retry{Backoff: -time.Second}, "retry.backoff"},
		{sqlease.Retry{Backoff: scheduler.MaxRetryBackoff + 1}, "retry.backoff"},
	} {
		err := scheduler.ValidateRetry(tc.r)
		if !errors.Is(err, sqlease.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field+" ") {
			t.Errorf("ValidateRetry(%+v) = %v, want an invalid-config error naming %s", tc.r, err, tc.field)
		}
	}
}
