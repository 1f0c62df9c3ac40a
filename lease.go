package sqlease

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"time"
)

// Lease is one row of the leases table. All times are database UTC.
type Lease struct {
	Name       string
	Holder     string
	Epoch      int64
	AcquiredAt time.Time
	RenewedAt  time.Time
	ExpiresAt  time.Time
	// ObservedAt is the database's clock when the row was read or written, so
	// that callers can compute the time left without consulting the host clock.
	ObservedAt time.Time
}

// Token returns the fencing token of the lease.
func (l Lease) Token() Token { return Token{Name: l.Name, Holder: l.Holder, Epoch: l.Epoch} }

// Remaining is the time left before the lease expires, in database time, as of
// ObservedAt. It is zero or negative for an expired lease.
func (l Lease) Remaining() time.Duration { return l.ExpiresAt.Sub(l.ObservedAt) }

// Expired reports whether the lease had expired at ObservedAt.
func (l Lease) Expired() bool { return !l.ExpiresAt.After(l.ObservedAt) }

// Token is a fencing token: the lease name, the holder that acquired it and the
// epoch of that acquisition. A write fenced by a token succeeds only while the
// lease row still carries the same holder and epoch and has not expired.
type Token struct {
	Name   string
	Holder string
	Epoch  int64
}

// IsZero reports whether t is the zero token (no leadership).
func (t Token) IsZero() bool { return t.Epoch == 0 }

func (t Token) String() string { return fmt.Sprintf("%s/%s@%d", t.Name, t.Holder, t.Epoch) }

// LeaseStore is the database seam of the lease: one implementation per SQL
// dialect (see package sqlstore), all held to the conformance suite in package
// storetest. Every time comparison happens in database time.
type LeaseStore interface {
	// Acquire inserts the lease or takes over an expired one in one atomic
	// conditional statement, setting holder, acquired_at = renewed_at = now,
	// expires_at = now + ttl and epoch + 1 (1 on insert) — also when holder
	// already held the expired lease. It returns ErrLeaseHeld when the lease
	// is held and unexpired.
	Acquire(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error)
	// Renew extends expires_at to now + ttl only if the row still carries the
	// token's holder and epoch and has not expired. It returns ErrLeaseLost
	// otherwise.
	Renew(ctx context.Context, tok Token, ttl time.Duration) (Lease, error)
	// Release expires the lease if the token still holds it. It returns
	// ErrLeaseLost when the token no longer holds the lease.
	Release(ctx context.Context, tok Token) error
	// Lease reads one lease. It returns ErrNoLease when no row exists.
	Lease(ctx context.Context, name string) (Lease, error)
	// Leases reads every lease, ordered by name.
	Leases(ctx context.Context) ([]Lease, error)
	// Fenced runs fn in one transaction that first verifies and locks the
	// lease row for the token (holder, epoch, unexpired in database time) and
	// verifies it again before commit, so no other instance's acquire can
	// commit while fn runs. It returns ErrFenceFailed (an ErrLeaseLost),
	// without calling fn or with fn's writes rolled back, when the token no
	// longer holds the lease. An error from fn rolls the transaction back
	// and is returned as is: not ErrFenceFailed, even when it wraps
	// ErrLeaseLost (a job lock lost inside fn).
	Fenced(ctx context.Context, tok Token, fn func(*sql.Tx) error) error
}

// MaxNameLen is the longest lease name or holder id accepted.
const MaxNameLen = 128

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]*$`)

// ValidateLeaseName returns an error wrapping ErrInvalidName unless name is
// 1–128 characters of letters, digits, '.', '_', ':' and '-', starting with a
// letter or digit.
func ValidateLeaseName(name string) error {
	if len(name) == 0 || len(name) > MaxNameLen || !nameRE.MatchString(name) {
		return fmt.Errorf("%w: lease name %q must be 1-%d characters of A-Z a-z 0-9 . _ : - starting with a letter or digit", ErrInvalidName, name, MaxNameLen)
	}
	return nil
}

// ValidateHolderID returns an error wrapping ErrInvalidName unless id is 1–128
// printable characters without spaces.
func ValidateHolderID(id string) error {
	if len(id) == 0 || len(id) > MaxNameLen {
		return fmt.Errorf("%w: holder id must be 1-%d characters, got %d", ErrInvalidName, MaxNameLen, len(id))
	}
	for _, r := range id {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("%w: holder id %q contains a space or control character", ErrInvalidName, id)
		}
	}
	return nil
}

// ValidateLease checks the arguments of a request for a lease (an acquire
// or a takeover): the name, the holder id and the duration.
func ValidateLease(name, holder string, ttl time.Duration) error {
	if err := ValidateLeaseName(name); err != nil {
		return err
	}
	if err := ValidateHolderID(holder); err != nil {
		return err
	}
	return ValidateTTL(ttl)
}

// ValidateTTL returns an error wrapping ErrInvalidConfig unless a lease
// duration is at least a millisecond, the databases' clock resolution.
func ValidateTTL(ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: lease ttl must be at least 1ms, got %s", ErrInvalidConfig, ttl)
	}
	return nil
}

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,30}$`)

// ValidateTablePrefix returns an error wrapping ErrInvalidName unless prefix is
// a safe SQL identifier fragment: a lower-case letter followed by up to 30
// lower-case letters, digits or underscores. Table names are built from it, so
// it is validated rather than quoted.
func ValidateTablePrefix(prefix string) error {
	if !prefixRE.MatchString(prefix) {
		return fmt.Errorf("%w: table prefix %q must match %s", ErrInvalidName, prefix, prefixRE)
	}
	return nil
}
