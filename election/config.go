package election

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/sqlease/sqlease"
)

// Defaults give a crash failover of at most DefaultLeaseDuration +
// DefaultAcquireInterval×(1+DefaultAcquireJitter) ≈ 7.2 s, and tolerate two
// consecutive failed renewals before the lease is at risk.
const (
	DefaultLeaseName       = "sqlease-leader"
	DefaultLeaseDuration   = 6 * time.Second
	DefaultRenewInterval   = 2 * time.Second
	DefaultAcquireInterval = 1 * time.Second
	DefaultAcquireJitter   = 0.2
	DefaultReleaseTimeout  = 2 * time.Second
)

// Config configures an Elector. Zero fields take the documented defaults.
type Config struct {
	// Store is the lease store (required).
	Store sqlease.LeaseStore
	// SessionLocker, when set, selects advisory mode (SPEC §3): followers
	// block on a database session lock and take the lease over — bumping the
	// epoch — as soon as the database frees it, instead of waiting for the
	// lease to expire; the leader renews through its locked session, and its
	// gate closes when heartbeats are two RenewIntervals late (re-opening if
	// they resume). Nil means lease mode.
	SessionLocker sqlease.SessionLocker
	// Changes, when set, signals that a lease changed holder or was
	// released (PostgreSQL: postgres.ListenLeases). A follower then looks at
	// once, and otherwise only when the lease it saw is due to expire (not
	// every AcquireInterval): in lease mode it acquires a released lease
	// without waiting for a poll; in advisory mode it refreshes the observed
	// leader, which it otherwise re-reads at most every 10 AcquireIntervals
	// (60 with Changes).
	Changes <-chan struct{}
	// LeaseName names the lease; instances with the same name compete.
	// Default DefaultLeaseName.
	LeaseName string
	// HolderID identifies this instance. Default "hostname-pid-random".
	HolderID string
	// LeaseDuration is how long an acquire or renew holds the lease, in
	// database time. Default DefaultLeaseDuration.
	LeaseDuration time.Duration
	// RenewInterval is how often the leader renews. It must be shorter than
	// LeaseDuration - SafetyMargin. Default DefaultRenewInterval.
	RenewInterval time.Duration
	// AcquireInterval is how often a follower polls the lease. Default
	// DefaultAcquireInterval.
	AcquireInterval time.Duration
	// AcquireJitter spreads polls over AcquireInterval×(1±AcquireJitter), in
	// [0, 1). Default DefaultAcquireJitter; a negative value means none.
	AcquireJitter float64
	// SafetyMargin is subtracted from the lease when computing the local
	// deadline; it covers clock-rate drift and the time between a gate check
	// and the action. Default LeaseDuration/6.
	SafetyMargin time.Duration
	// ReleaseTimeout bounds the release on shutdown. Default
	// DefaultReleaseTimeout.
	ReleaseTimeout time.Duration
	// Willing, when set, is asked before this instance acquires a free
	// (missing or expired) lease: while it answers false the instance leaves
	// the lease to others for ReluctantFor, and takes it after that if no
	// one did, so that a lease is never left unheld. Package singleton uses
	// it to spread singletons over the fleet. It does not hold back an
	// advisory takeover through the session lock (the fast path).
	Willing func() bool
	// ReluctantFor is how long an unwilling instance leaves a free lease to
	// others. Default 3 AcquireIntervals.
	ReluctantFor time.Duration
	// ResignHoldoff is how long an instance that resigned (Resign) stays a
	// follower before competing again, so that another instance takes the
	// lease. Default LeaseDuration.
	ResignHoldoff time.Duration

	// OnStartedLeading runs in its own goroutine when leadership is gained;
	// ctx is cancelled the moment leadership is lost or can no longer be
	// trusted. The elector will not lead again, nor release the lease on
	// shutdown, before it returns (shutdown waits at most until the local
	// deadline).
	OnStartedLeading func(ctx context.Context, tok sqlease.Token)
	// OnStoppedLeading runs when leadership ends, for whatever reason, always
	// after that term's OnStartedLeading was entered (it may still be
	// running: its context is already cancelled).
	OnStoppedLeading func(tok sqlease.Token)
	// OnNewLeader runs when a follower observes a different holder or epoch
	// (also this instance's own, when it becomes leader).
	OnNewLeader func(holder string, epoch int64)

	// Logger receives the events of SPEC §2 (leader_acquired, leader_renewed,
	// leader_lost, leader_acquire_failed, leader_renew_failed). Nil discards.
	Logger *slog.Logger
	// Observer receives metric events. Nil ignores them.
	Observer sqlease.Observer
	// Clock is the local monotonic clock. Nil means the system clock.
	Clock sqlease.Clock
}

func (c Config) withDefaults() Config {
	if c.LeaseName == "" {
		c.LeaseName = DefaultLeaseName
	}
	if c.HolderID == "" {
		c.HolderID = DefaultHolderID()
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = DefaultRenewInterval
	}
	if c.AcquireInterval == 0 {
		c.AcquireInterval = DefaultAcquireInterval
	}
	if c.AcquireJitter == 0 {
		c.AcquireJitter = DefaultAcquireJitter
	} else if c.AcquireJitter < 0 {
		c.AcquireJitter = 0
	}
	if c.SafetyMargin == 0 {
		c.SafetyMargin = c.LeaseDuration / 6
	}
	if c.ReleaseTimeout == 0 {
		c.ReleaseTimeout = DefaultReleaseTimeout
	}
	if c.ReluctantFor == 0 {
		c.ReluctantFor = 3 * c.AcquireInterval
	}
	if c.ResignHoldoff == 0 {
		c.ResignHoldoff = c.LeaseDuration
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = sqlease.NopObserver{}
	}
	if c.Clock == nil {
		c.Clock = sqlease.SystemClock{}
	}
	return c
}

// Validate reports every broken rule of c (after defaults), one error per
// rule, each wrapping sqlease.ErrInvalidConfig and naming the field.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{sqlease.ErrInvalidConfig}, args...)...))
	}
	if c.Store == nil {
		bad("store is required")
	}
	if err := sqlease.ValidateLeaseName(c.LeaseName); err != nil {
		bad("lease_name: %v", err)
	}
	if err := sqlease.ValidateHolderID(c.HolderID); err != nil {
		bad("holder_id: %v", err)
	}
	if c.LeaseDuration < 10*time.Millisecond {
		bad("lease_duration must be at least 10ms, got %s", c.LeaseDuration)
	}
	if c.RenewInterval <= 0 {
		bad("renew_interval must be positive, got %s", c.RenewInterval)
	}
	if c.AcquireInterval <= 0 {
		bad("acquire_interval must be positive, got %s", c.AcquireInterval)
	}
	if c.AcquireJitter >= 1 {
		bad("acquire_jitter must be in [0, 1), got %g", c.AcquireJitter)
	}
	if c.SafetyMargin < 0 || c.SafetyMargin >= c.LeaseDuration {
		bad("safety_margin must be in [0, lease_duration), got %s with lease_duration %s", c.SafetyMargin, c.LeaseDuration)
	}
	if c.RenewInterval >= c.LeaseDuration {
		bad("renew_interval (%s) must be shorter than lease_duration (%s)", c.RenewInterval, c.LeaseDuration)
	} else if c.RenewInterval >= c.LeaseDuration-c.SafetyMargin {
		bad("renew_interval (%s) must be shorter than lease_duration - safety_margin (%s - %s) to leave room to renew before the local deadline",
			c.RenewInterval, c.LeaseDuration, c.SafetyMargin)
	}
	if c.ReleaseTimeout <= 0 {
		bad("release_timeout must be positive, got %s", c.ReleaseTimeout)
	}
	if c.ReluctantFor < 0 {
		bad("reluctant_for must not be negative, got %s", c.ReluctantFor)
	}
	if c.ResignHoldoff < 0 {
		bad("resign_holdoff must not be negative, got %s", c.ResignHoldoff)
	}
	return errors.Join(errs...)
}

// DefaultHolderID returns "hostname-pid-random" with 8 random hex digits, so
// a restarted process never reuses its predecessor's identity.
func DefaultHolderID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	if len(id) > sqlease.MaxNameLen {
		id = id[len(id)-sqlease.MaxNameLen:]
	}
	return id
}
