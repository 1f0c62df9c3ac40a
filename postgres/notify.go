package postgres

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlease/sqlease"
)

// ListenJobs returns a change feed of the jobs table under prefix, for
// scheduler.Config.Changes: a signal after every committed transaction that
// wrote jobs (a trigger NOTIFYs the channel named like the table). It keeps
// one connection LISTENing, blocked reading, until ctx ends; when that
// connection breaks it reconnects with backoff and signals once, since
// notifications may have been missed meanwhile.
func ListenJobs(ctx context.Context, dsn, prefix string, log *slog.Logger) (<-chan struct{}, error) {
	return listenTable(ctx, dsn, prefix, "_jobs", log)
}

// ListenLeases is the change feed of the leases table under prefix, for
// election.Config.Changes: a signal whenever a lease changes holder or epoch
// or is released — not on renewals — so that followers look at once instead
// of at their next poll. Like ListenJobs, it signals once after reconnecting.
func ListenLeases(ctx context.Context, dsn, prefix string, log *slog.Logger) (<-chan struct{}, error) {
	return listenTable(ctx, dsn, prefix, "_leases", log)
}

// ListenSingletons is the change feed of the singletons table under
// prefix: a signal whenever a daemon singleton is created, changed, paused,
// resumed or deleted (not on saves or heartbeats). Like ListenJobs, it
// signals once after (re)connecting.
func ListenSingletons(ctx context.Context, dsn, prefix string, log *slog.Logger) (<-chan struct{}, error) {
	return listenTable(ctx, dsn, prefix, "_singletons", log)
}

// LeaseFeed is the change feed of the leases table split by lease name, so
// that many electors (the leader's and one per singleton) share one
// LISTENing connection and each wakes only for its own lease. After a
// reconnect every subscriber is signalled once.
type LeaseFeed struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

// ListenLeaseFeed starts a LeaseFeed for the leases table under prefix; it
// runs until ctx ends.
func ListenLeaseFeed(ctx context.Context, dsn, prefix string, log *slog.Logger) (*LeaseFeed, error) {
	return ListenLeaseFeedAs(ctx, dsn, prefix, "", log)
}

// ListenLeaseFeedAs is ListenLeaseFeed whose connection, when holder is
// not empty, is named NodeSessionName(holder): the node's session, which
// the dashboard looks for (NodeSessions) to tell a live node from a dead
// one within moments, at no statement at all while idle.
func ListenLeaseFeedAs(ctx context.Context, dsn, prefix, holder string, log *slog.Logger) (*LeaseFeed, error) {
	f := &LeaseFeed{subs: map[string]map[chan struct{}]struct{}{}}
	app := "sqlease-listen"
	if holder != "" {
		app = NodeSessionName(holder)
	}
	if err := listenPayloads(ctx, dsn, prefix, "_leases", app, log, f.signal); err != nil {
		return nil, err
	}
	return f, nil
}

// Subscribe returns a feed of the changes of one lease, for
// election.Config.Changes, and the function that ends the subscription.
func (f *LeaseFeed) Subscribe(lease string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	ch <- struct{}{} // a subscriber may have missed changes before now
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subs[lease] == nil {
		f.subs[lease] = map[chan struct{}]struct{}{}
	}
	f.subs[lease][ch] = struct{}{}
	return ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.subs[lease], ch)
		if len(f.subs[lease]) == 0 {
			delete(f.subs, lease)
		}
	}
}

// signal wakes the subscribers of lease, or all of them for "" (after a
// (re)connect, when notifications may have been missed).
func (f *LeaseFeed) signal(lease string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, chans := range f.subs {
		if lease != "" && name != lease {
			continue
		}
		for ch := range chans {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

func listenTable(ctx context.Context, dsn, prefix, table string, log *slog.Logger) (<-chan struct{}, error) {
	out := make(chan struct{}, 1)
	signal := func(string) {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	if err := listenPayloads(ctx, dsn, prefix, table, "sqlease-listen", log, signal); err != nil {
		return nil, err
	}
	return out, nil
}

// listenPayloads keeps a connection LISTENing on the channel of table and
// calls signal with each notification's payload, and with "" after every
// (re)connect; app is the connection's application_name.
func listenPayloads(ctx context.Context, dsn, prefix, table, app string, log *slog.Logger, signal func(payload string)) error {
	if err := sqlease.ValidateTablePrefix(prefix); err != nil {
		return err
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.RuntimeParams["application_name"] = app
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	go func() {
		backoff := 100 * time.Millisecond
		for ctx.Err() == nil {
			err := listen(ctx, cfg, prefix+table, signal)
			if ctx.Err() != nil {
				return
			}
			log.Warn("listen_failed", slog.String("channel", prefix+table), slog.String("error", err.Error()), slog.Duration("retry_in", backoff))
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
		}
	}()
	return nil
}

func listen(ctx context.Context, cfg *pgx.ConnConfig, channel string, signal func(string)) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// The identifier is a validated prefix plus a fixed suffix: safe to
	// quote as is.
	if _, err := conn.Exec(ctx, `LISTEN "`+channel+`"`); err != nil {
		return err
	}
	signal("") // anything committed before LISTEN took effect
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		signal(n.Payload)
	}
}
