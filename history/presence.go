package history

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// Defaults of Presence.
const (
	DefaultPresenceEvery = 30 * time.Second
	DefaultPresenceTTL   = 90 * time.Second
	// DefaultStatusCheck is how often PresenceConfig.Status is looked at
	// (in memory: no statement unless it changed).
	DefaultStatusCheck = 2 * time.Second
	// DefaultStatusRefresh is how old the last status record may grow
	// before it is written again unchanged, so that pruning the history
	// never leaves a live node without one.
	DefaultStatusRefresh = 6 * time.Hour
)

// Presence keeps the lease sqlstore.NodeLeasePrefix + holder while ctx
// lasts, renewing it every every for ttl, and releases it when ctx ends.
// It fences nothing: it only shows which nodes are up — followers included,
// which otherwise write nothing while they wait — so that an operator (the
// dashboard's "nodes") sees a node that died go stale within ttl and one
// that stopped go at once. It costs one statement per node per every.
// Failures are logged at Debug and retried at the next tick.
func Presence(ctx context.Context, store sqlease.LeaseStore, holder string, every, ttl time.Duration, log *slog.Logger) {
	RunPresence(ctx, PresenceConfig{Store: store, Holder: holder, Every: every, TTL: ttl, Logger: log})
}

// StatusRecorder writes a node's status records (*sqlstore.Store).
type StatusRecorder interface {
	RecordLeaseEvent(ctx context.Context, e sqlstore.LeaseEvent, ago time.Duration) error
}

// PresenceConfig configures RunPresence.
type PresenceConfig struct {
	// Store keeps the presence lease (required).
	Store sqlease.LeaseStore
	// Holder is this node's holder id (required).
	Holder string
	// Every and TTL: the presence lease is renewed every Every for TTL
	// (defaults DefaultPresenceEvery, DefaultPresenceTTL).
	Every, TTL time.Duration
	// Status, when set with Recorder, is the node's readiness line
	// (httpapi.Readiness) and whether it is ready. It is checked every
	// StatusCheck in memory and recorded in the leadership history under
	// the presence lease's name (event sqlstore.EventNodeStatus) only
	// when it changes, when the presence lease is (re)acquired, and every
	// DefaultStatusRefresh: an idle node's database load does not grow.
	Status func() (ready bool, line string)
	// Version is recorded with the status (sqlease version, one word).
	Version string
	// Extra fields ("key=value") recorded with the status, e.g.
	// "session=pg": the node keeps a database session others can see.
	Extra []string
	// Recorder writes the status records.
	Recorder StatusRecorder
	// StatusCheck: default DefaultStatusCheck.
	StatusCheck time.Duration
	// Logger receives failures at Debug. Nil discards.
	Logger *slog.Logger
}

// RunPresence is Presence with a status record (PresenceConfig.Status).
func RunPresence(ctx context.Context, cfg PresenceConfig) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultPresenceEvery
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultPresenceTTL
	}
	if cfg.StatusCheck <= 0 {
		cfg.StatusCheck = DefaultStatusCheck
	}
	holder := cfg.Holder
	name := sqlstore.NodeLeasePrefix + holder
	if err := sqlease.ValidateLease(name, holder, cfg.TTL); err != nil {
		log.Warn("node_presence_unavailable", slog.String("error", err.Error()),
			slog.String("hint", "the holder id is not usable in a lease name: the dashboard shows this node only while it holds another lease"))
		return
	}
	store := cfg.Store
	var tok sqlease.Token
	t := time.NewTimer(0)
	defer t.Stop()
	var check <-chan time.Time
	if cfg.Status != nil && cfg.Recorder != nil {
		tick := time.NewTicker(cfg.StatusCheck)
		defer tick.Stop()
		check = tick.C
	}
	var recorded string // the last status written, "" for none
	var recordedAt time.Time
	record := func() {
		if check == nil || tok.Epoch == 0 {
			return
		}
		s := StatusLine(cfg.Status, cfg.Version, cfg.Extra...)
		if s == recorded && time.Since(recordedAt) < DefaultStatusRefresh {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, DefaultWriteTimeout)
		err := cfg.Recorder.RecordLeaseEvent(wctx, sqlstore.LeaseEvent{Lease: name, Event: sqlstore.EventNodeStatus,
			Holder: holder, Epoch: tok.Epoch, Reason: s}, 0)
		cancel()
		if err != nil {
			log.Debug("node_status_record_failed", slog.String("error", err.Error()))
			return
		}
		recorded, recordedAt = s, time.Now()
	}
	for {
		select {
		case <-ctx.Done():
			if tok.Epoch != 0 {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultWriteTimeout)
				_ = store.Release(rctx, tok)
				cancel()
			}
			return
		case <-check:
			record()
			continue
		case <-t.C:
		}
		if tok.Epoch != 0 {
			_, err := store.Renew(ctx, tok, cfg.TTL)
			if errors.Is(err, sqlease.ErrLeaseLost) {
				tok = sqlease.Token{}
			} else if err != nil {
				log.Debug("node_presence_failed", slog.String("error", err.Error()))
			}
		}
		if tok.Epoch == 0 && ctx.Err() == nil {
			// Held already: this node's row from before a restart, live
			// until it expires, or another process with this holder id.
			l, err := store.Acquire(ctx, name, holder, cfg.TTL)
			switch {
			case err == nil:
				tok = l.Token()
				recorded = "" // a new presence: record the status again
				record()
			case !errors.Is(err, sqlease.ErrLeaseHeld):
				log.Debug("node_presence_failed", slog.String("error", err.Error()))
			}
		}
		t.Reset(cfg.Every)
	}
}

// StatusLine is the status record of a node: "ready=true|false", the
// readiness line without its fields that change on every renewal
// (lease_expires_at, db_last_contact_age), and "version=" with the
// version, its blanks as '_', then extra.
func StatusLine(status func() (bool, string), version string, extra ...string) string {
	ready, line := status()
	var b strings.Builder
	if ready {
		b.WriteString("ready=true")
	} else {
		b.WriteString("ready=false")
	}
	for _, f := range strings.Fields(line) {
		if strings.HasPrefix(f, "lease_expires_at=") || strings.HasPrefix(f, "db_last_contact_age=") {
			continue
		}
		b.WriteString(" " + f)
	}
	if version != "" {
		b.WriteString(" version=" + strings.Join(strings.Fields(version), "_"))
	}
	for _, e := range extra {
		b.WriteString(" " + e)
	}
	return b.String()
}
