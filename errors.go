package sqlease

import (
	"errors"
	"fmt"
)

var (
	// ErrNotLeader is returned by the acting gate (election.Elector.Require and
	// Ensure) when this instance does not hold the lease, or no longer trusts
	// that it does because its local deadline has passed.
	ErrNotLeader = errors.New("sqlease: not leader")

	// ErrLeaseLost is returned by LeaseStore.Renew, Release and Fenced, and by
	// Elector.Fenced, when the token no longer holds the lease: another holder
	// took it over, the epoch moved on, or it expired in database time.
	ErrLeaseLost = errors.New("sqlease: lease lost")

	// ErrFenceFailed is returned by LeaseStore.Fenced (and Elector.Fenced)
	// when the fence itself failed: the lease row no longer carries the
	// token unexpired, or the transaction outlived the lease. It wraps
	// ErrLeaseLost. Errors of the callback's own writes — a job lock lost
	// inside the transaction, a constraint — do not wrap it: they do not
	// say that the lease is lost.
	ErrFenceFailed = fmt.Errorf("%w: fence failed", ErrLeaseLost)

	// ErrLeaseHeld is returned by LeaseStore.Acquire when another holder (or
	// this one, under an unexpired earlier epoch) holds the lease.
	ErrLeaseHeld = errors.New("sqlease: lease held")

	// ErrNoLease is returned by LeaseStore.Lease when no row exists for the name.
	ErrNoLease = errors.New("sqlease: no such lease")

	// ErrNoJob is returned by job reads and changes when no job has the name.
	ErrNoJob = errors.New("sqlease: no such job")

	// ErrConflict is returned when a write clashes with existing state: a
	// job name taken with different content, or a run attempt already
	// started by another dispatcher.
	ErrConflict = errors.New("sqlease: conflict")

	// ErrTimedOut is wrapped by run handlers whose action exceeded its
	// timeout; the scheduler records the run as timed_out.
	ErrTimedOut = errors.New("sqlease: run timed out")

	// ErrInvalidName is wrapped by the validation errors of lease names,
	// holder ids and table prefixes.
	ErrInvalidName = errors.New("sqlease: invalid name")

	// ErrInvalidConfig is wrapped by configuration validation errors; the
	// message names the field and the rule.
	ErrInvalidConfig = errors.New("sqlease: invalid configuration")

	// ErrStorage is matched (errors.Is) by every error the database
	// returned to a store call, so that callers can tell a storage fault
	// (the API answers 503 with its reason) from bad input or a bug.
	ErrStorage = errors.New("sqlease: database error")

	// ErrTransient is wrapped by dialects around database errors that are
	// worth retrying: connection loss, deadlock, serialization failure,
	// "database is locked", cloud throttling.
	ErrTransient = errors.New("sqlease: transient database error")
)
