package history

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// Defaults of Presence.
const (
	DefaultPresenceEvery = 30 * time.Second
	DefaultPresenceTTL   = 90 * time.Second
)

// Presence keeps the lease sqlstore.NodeLeasePrefix + holder while ctx
// lasts, renewing it every every for ttl, and releases it when ctx ends.
// It fences nothing: it only shows which nodes are up — followers included,
// which otherwise write nothing while they wait — so that an operator (the
// dashboard's "nodes seen recently") sees a node that died go stale within
// ttl and one that stopped go at once. It costs one statement per node per
// every. Failures are logged at Debug and retried at the next tick.
func Presence(ctx context.Context, store sqlease.LeaseStore, holder string, every, ttl time.Duration, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	name := sqlstore.NodeLeasePrefix + holder
	if err := sqlease.ValidateLease(name, holder, ttl); err != nil {
		log.Warn("node_presence_unavailable", slog.String("error", err.Error()),
			slog.String("hint", "the holder id is not usable in a lease name: the dashboard shows this node only while it holds another lease"))
		return
	}
	var tok sqlease.Token
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if tok.Epoch != 0 {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultWriteTimeout)
				_ = store.Release(rctx, tok)
				cancel()
			}
			return
		case <-t.C:
		}
		if tok.Epoch != 0 {
			_, err := store.Renew(ctx, tok, ttl)
			if errors.Is(err, sqlease.ErrLeaseLost) {
				tok = sqlease.Token{}
			} else if err != nil {
				log.Debug("node_presence_failed", slog.String("error", err.Error()))
			}
		}
		if tok.Epoch == 0 && ctx.Err() == nil {
			// Held already: this node's row from before a restart, live
			// until it expires, or another process with this holder id.
			l, err := store.Acquire(ctx, name, holder, ttl)
			switch {
			case err == nil:
				tok = l.Token()
			case !errors.Is(err, sqlease.ErrLeaseHeld):
				log.Debug("node_presence_failed", slog.String("error", err.Error()))
			}
		}
		t.Reset(every)
	}
}
