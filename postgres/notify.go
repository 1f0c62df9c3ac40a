package postgres

import (
	"context"
	"log/slog"
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

func listenTable(ctx context.Context, dsn, prefix, table string, log *slog.Logger) (<-chan struct{}, error) {
	if err := sqlease.ValidateTablePrefix(prefix); err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = "sqlease-listen"
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	out := make(chan struct{}, 1)
	signal := func() {
		select {
		case out <- struct{}{}:
		default:
		}
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
	return out, nil
}

func listen(ctx context.Context, cfg *pgx.ConnConfig, channel string, signal func()) error {
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
	signal() // anything committed before LISTEN took effect
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		signal()
	}
}
