package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/tick"
	"github.com/sqlease/sqlease/mysql"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/sqlserver"
)

// How durable a 2xx is (SPEC G7, issue 31 item 3): each node finds out, at
// start and then every replicationEvery, whether its database acknowledges
// a commit only once a standby has it, says so (a line of /readyz, gauges, a
// dashboard badge, one warning at start when standbys are asynchronous), and
// with --require-synchronous-replication refuses to lead and to accept
// writes while it is not so.

// replicationEvery is how often a node reads its database's replication
// state: one small query, so that a standby lost or regained shows within
// it.
const replicationEvery = 15 * time.Second

// ErrNotDurable is the refusal of a node run with
// --require-synchronous-replication while its writes would not survive a
// failover.
var ErrNotDurable = errors.New("sqlease: writes would not survive a database failover")

// replicationWatch holds the node's latest durability reading.
type replicationWatch struct {
	read    func(ctx context.Context) (sqlease.Durability, error)
	log     *slog.Logger
	require bool
	cur     atomic.Pointer[sqlease.Durability]
}

// newReplicationWatch reads the dialect's replication state on db.
func newReplicationWatch(dialect string, db *sql.DB, log *slog.Logger, require bool) *replicationWatch {
	w := &replicationWatch{log: log, require: require}
	switch dialect {
	case "postgres":
		w.read = func(ctx context.Context) (sqlease.Durability, error) { return postgres.ReadReplication(ctx, db) }
	case "mysql":
		w.read = func(ctx context.Context) (sqlease.Durability, error) { return mysql.ReadReplication(ctx, db) }
	case "sqlserver":
		w.read = func(ctx context.Context) (sqlease.Durability, error) { return sqlserver.ReadReplication(ctx, db) }
	default:
		w.read = func(context.Context) (sqlease.Durability, error) {
			return sqlease.Durability{Mode: sqlease.DurabilitySingle, Detail: "an embedded SQLite file: a commit is on this host's disk alone"}, nil
		}
	}
	w.cur.Store(&sqlease.Durability{Mode: sqlease.DurabilityUnknown, Detail: "not read yet"})
	return w
}

// Current is the latest reading.
func (w *replicationWatch) Current() sqlease.Durability { return *w.cur.Load() }

// refresh reads the state once; start says it is the node's first reading.
func (w *replicationWatch) refresh(ctx context.Context, start bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := w.read(ctx)
	if err != nil {
		if ctx.Err() != nil && !start {
			return
		}
		d = sqlease.Durability{Mode: sqlease.DurabilityUnknown, Detail: "cannot read the replication state: " + err.Error()}
	}
	prev := w.cur.Swap(&d)
	switch {
	case start && d.Mode == sqlease.DurabilityAsynchronous:
		w.log.Warn("durability_asynchronous", slog.String("durability", d.String()), slog.String("detail", d.Detail),
			slog.String("hint", "standbys receive commits asynchronously: a failover may lose acknowledged writes (2xx answers) and, "+
				"on MySQL/MariaDB and SQL Server, hand epochs out again; configure synchronous replication, or run with "+
				"--require-synchronous-replication to refuse work while it is off"))
	case start:
		w.log.Info("durability", slog.String("durability", d.String()), slog.String("detail", d.Detail))
	case prev.Mode != d.Mode:
		level := slog.LevelInfo
		if d.Mode != sqlease.DurabilitySynchronous && d.Mode != sqlease.DurabilitySingle {
			level = slog.LevelWarn
		}
		w.log.Log(ctx, level, "durability_changed", slog.String("durability", d.String()),
			slog.String("was", string(prev.Mode)), slog.String("detail", d.Detail))
	}
}

// run re-reads the state until ctx ends.
func (w *replicationWatch) run(ctx context.Context) {
	tick.Every(ctx, replicationEvery, func() { w.refresh(ctx, false) })
}

// check is nil unless the node requires synchronous replication and its
// latest reading is not synchronous: then an error wrapping ErrNotDurable
// that says why.
func (w *replicationWatch) check() error {
	if !w.require {
		return nil
	}
	d := w.Current()
	if d.Synchronous() {
		return nil
	}
	return fmt.Errorf("%w (%s: %s); the node runs with --require-synchronous-replication", ErrNotDurable, d.String(), d.Detail)
}

// register exports the reading: sqlease_replication_synchronous (1 while a
// commit waits for a standby) and sqlease_replication_standbys{sync}.
func (w *replicationWatch) register(reg prometheus.Registerer) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sqlease_replication_synchronous",
		Help: "1 while the database acknowledges this node's commits only once a standby has them (a 2xx survives a failover), else 0."},
		func() float64 {
			if w.Current().Synchronous() {
				return 1
			}
			return 0
		}))
	standbys := func(sync bool) prometheus.GaugeFunc {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sqlease_replication_standbys",
			Help:        "Standbys connected to the database, by whether commits wait for them.",
			ConstLabels: prometheus.Labels{"sync": fmt.Sprint(sync)}},
			func() float64 {
				d := w.Current()
				if sync {
					return float64(d.Sync)
				}
				return float64(d.Async)
			})
	}
	reg.MustRegister(standbys(true), standbys(false))
}

// requireLeases makes a lease store refuse to acquire and renew while the
// node requires synchronous replication and does not have it: such a node
// does not lead (nor hold a worker's or a singleton's lease), and a leader
// whose standby went away gives its term up at its next renewal. A refused
// acquire reads as a lease held elsewhere (wrapping ErrNotDurable too): the
// elector then waits quietly instead of warning every acquire interval —
// the node's durability_* log lines and /readyz say why.
type requireLeases struct {
	sqlease.LeaseStore
	check func() error
}

// Unwrap returns the store s wraps (its Fenced is that store's).
func (s requireLeases) Unwrap() sqlease.LeaseStore { return s.LeaseStore }

func (s requireLeases) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (sqlease.Lease, error) {
	if err := s.check(); err != nil {
		return sqlease.Lease{}, fmt.Errorf("%w: %w", sqlease.ErrLeaseHeld, err)
	}
	return s.LeaseStore.Acquire(ctx, name, holder, ttl)
}

func (s requireLeases) Renew(ctx context.Context, tok sqlease.Token, ttl time.Duration) (sqlease.Lease, error) {
	if err := s.check(); err != nil {
		return sqlease.Lease{}, err
	}
	return s.LeaseStore.Renew(ctx, tok, ttl)
}

// requireLocker is requireLeases for advisory mode's sessions: their
// takeovers and renewals are refused alike.
func requireLocker(next sqlease.SessionLocker, check func() error) sqlease.SessionLocker {
	return func(ctx context.Context, name string) (sqlease.SessionLock, error) {
		l, err := next(ctx, name)
		if err != nil {
			return nil, err
		}
		return requireLock{l, check}, nil
	}
}

type requireLock struct {
	sqlease.SessionLock
	check func() error
}

func (l requireLock) Takeover(ctx context.Context, name, holder string, ttl time.Duration) (sqlease.Lease, error) {
	if err := l.check(); err != nil {
		return sqlease.Lease{}, fmt.Errorf("%w: %w", sqlease.ErrLeaseHeld, err)
	}
	return l.SessionLock.Takeover(ctx, name, holder, ttl)
}

func (l requireLock) Renew(ctx context.Context, tok sqlease.Token, ttl time.Duration) (sqlease.Lease, error) {
	if err := l.check(); err != nil {
		return sqlease.Lease{}, err
	}
	return l.SessionLock.Renew(ctx, tok, ttl)
}
