// Package history writes the leadership history of a lease from the node
// that holds it: acquired, released, lost and taken over, with holder,
// epoch, database time and reason (sqlstore.LeaseEvent).
//
// A Recorder is an sqlease.Observer for one elector. Its writes are best
// effort and never delay or fail leadership: the observer's calls only
// queue an event (a full queue drops it, with a Warn), and one goroutine
// writes them in order. A node killed with -9 writes nothing more; the
// next holder records its takeover as taken_over, naming the epoch whose
// lease expired without a release. The lease row stays the one authority
// on who leads; the history explains how it got there.
//
// Reasons come from the elector's own log records (leader_lost,
// leader_released: Recorder.Logger wraps the elector's logger), which it
// emits just before it reports the end of a term to the observer.
package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// Store is what a Recorder writes to (*sqlstore.Store).
type Store interface {
	RecordLeaseEvent(ctx context.Context, e sqlstore.LeaseEvent, ago time.Duration) error
	LeaseHistory(ctx context.Context, name string, before int64, limit int) ([]sqlstore.LeaseEvent, error)
	PruneLeaseHistory(ctx context.Context, retention time.Duration) (int64, error)
}

// Defaults of Config.
const (
	DefaultQueue        = 64
	DefaultWriteTimeout = 5 * time.Second
	// DefaultSettle is how long a new holder waits for its predecessor's
	// release row before it calls the takeover taken_over: on PostgreSQL a
	// release wakes the follower at once, and its acquire can overtake the
	// row the releasing node writes right after.
	DefaultSettle = 300 * time.Millisecond
)

// Config configures a Recorder.
type Config struct {
	// Store receives the events (required).
	Store Store
	// Holder is this node's holder id (required).
	Holder string
	// Next receives every observer call as well (e.g. the metrics
	// observer). Nil: none.
	Next sqlease.Observer
	// Retention is how long rows are kept: while this node leads, it
	// deletes older ones now and then. Zero or negative keeps them forever.
	Retention time.Duration
	// Logger receives the recorder's own warnings. Nil discards.
	Logger *slog.Logger
	// Queue bounds the events waiting to be written. Default DefaultQueue.
	Queue int
	// WriteTimeout bounds one write. Default DefaultWriteTimeout.
	WriteTimeout time.Duration
	// Settle: see DefaultSettle. Negative: do not wait.
	Settle time.Duration
}

// Recorder is an sqlease.Observer that writes the leadership history.
type Recorder struct {
	sqlease.Observer // Next, for the calls the recorder does not need
	cfg              Config
	log              *slog.Logger
	events           chan change

	mu      sync.Mutex
	endings map[int64]ending // by epoch: what the elector logged about a term's end
	leading map[string]bool
	dropped int64
}

// change is one observer call waiting to be written.
type change struct {
	lease   string
	leading bool
	epoch   int64
	at      time.Time // local, monotonic
	end     ending
}

// ending is how a term ended, as the elector logged it.
type ending struct {
	event, reason string
}

// New returns a Recorder; Run writes its events.
func New(cfg Config) (*Recorder, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("history: %w: Store is required", sqlease.ErrInvalidConfig)
	}
	if err := sqlease.ValidateHolderID(cfg.Holder); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	if cfg.Next == nil {
		cfg.Next = sqlease.NopObserver{}
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.Settle == 0 {
		cfg.Settle = DefaultSettle
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Recorder{Observer: cfg.Next, cfg: cfg, log: cfg.Logger, events: make(chan change, cfg.Queue),
		endings: map[int64]ending{}, leading: map[string]bool{}}, nil
}

// LeadershipChanged implements sqlease.Observer: it queues the event and
// returns at once.
func (r *Recorder) LeadershipChanged(name string, leading bool, epoch int64) {
	r.cfg.Next.LeadershipChanged(name, leading, epoch)
	c := change{lease: name, leading: leading, epoch: epoch, at: time.Now()}
	r.mu.Lock()
	r.leading[name] = leading
	if !leading {
		c.end = r.endings[epoch]
		delete(r.endings, epoch)
	}
	r.mu.Unlock()
	select {
	case r.events <- c:
	default:
		r.mu.Lock()
		r.dropped++
		n := r.dropped
		r.mu.Unlock()
		r.log.Warn("lease_history_dropped", slog.String("lease_name", name), slog.Int64("lease_epoch", epoch), slog.Int64("dropped", n))
	}
}

// Logger returns log with a handler that also tells the recorder how the
// elector's terms end: pass it as the elector's Config.Logger. Records
// reach log's own handler unchanged.
func (r *Recorder) Logger(log *slog.Logger) *slog.Logger {
	return slog.New(endingHandler{Handler: log.Handler(), r: r})
}

// endingHandler captures the elector's leader_lost, leader_released and
// leader_release_failed records.
type endingHandler struct {
	slog.Handler
	r *Recorder
}

// Enabled lets Info records through to Handle even when the node logs
// only warnings: a released term must be recorded all the same.
func (h endingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.Handler.Enabled(ctx, l)
}

func (h endingHandler) Handle(ctx context.Context, rec slog.Record) error {
	var event string
	switch rec.Message {
	case "leader_lost", "leader_release_failed":
		event = sqlstore.EventLost
	case "leader_released":
		event = sqlstore.EventReleased
	}
	if event != "" {
		var epoch int64
		var reason, sqlErr string
		rec.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "lease_epoch":
				epoch = a.Value.Int64()
			case "reason":
				reason = a.Value.String()
			case "sql_error":
				sqlErr = a.Value.String()
			}
			return true
		})
		if rec.Message == "leader_release_failed" {
			reason = "release failed; the lease is left to expire"
		}
		if sqlErr != "" {
			reason += ": " + sqlErr
		}
		h.r.mu.Lock()
		h.r.endings[epoch] = ending{event: event, reason: reason}
		h.r.mu.Unlock()
	}
	if !h.Handler.Enabled(ctx, rec.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, rec)
}

func (h endingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return endingHandler{Handler: h.Handler.WithAttrs(as), r: h.r}
}

func (h endingHandler) WithGroup(name string) slog.Handler {
	return endingHandler{Handler: h.Handler.WithGroup(name), r: h.r}
}

// Run writes queued events until ctx ends, then those still queued (for a
// moment: the release of a shutdown comes last), and prunes old rows while
// this node leads.
func (r *Recorder) Run(ctx context.Context) error {
	var prune <-chan time.Time
	if r.cfg.Retention > 0 {
		t := time.NewTicker(min(max(r.cfg.Retention/10, time.Second), 10*time.Minute))
		defer t.Stop()
		prune = t.C
	}
	for {
		select {
		case c := <-r.events:
			r.write(ctx, c)
		case <-prune:
			r.prune(ctx)
		case <-ctx.Done():
			for {
				select {
				case c := <-r.events:
					r.write(ctx, c)
				default:
					return nil
				}
			}
		}
	}
}

// write records one change; failures are logged and forgotten. Its
// statements outlive ctx (each bounded by WriteTimeout): the last events of
// a shutdown are written after it ends.
func (r *Recorder) write(ctx context.Context, c change) {
	e := sqlstore.LeaseEvent{Lease: c.lease, Holder: r.cfg.Holder, Epoch: c.epoch}
	if c.leading {
		e.Event, e.Reason = r.startEvent(ctx, c)
	} else {
		e.Event, e.Reason = c.end.event, c.end.reason
		if e.Event == "" {
			e.Event = sqlstore.EventLost
		}
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
	defer cancel()
	if err := r.cfg.Store.RecordLeaseEvent(wctx, e, time.Since(c.at)); err != nil {
		r.log.Warn("lease_history_write_failed", slog.String("lease_name", c.lease), slog.String("event", e.Event),
			slog.Int64("lease_epoch", c.epoch), slog.String("error", err.Error()))
	}
}

// startEvent tells an acquisition from a takeover: the term before it
// (epoch - 1) was taken over if the history has its start but no end.
func (r *Recorder) startEvent(ctx context.Context, c change) (event, reason string) {
	if c.epoch <= 1 {
		return sqlstore.EventAcquired, ""
	}
	var settled bool
	for {
		prev, err := r.last(ctx, c.lease)
		switch {
		case err != nil:
			return sqlstore.EventAcquired, ""
		case prev.Epoch != c.epoch-1:
			// Unknown predecessor (no history, pruned, or written out of
			// order): say nothing rather than guess.
			return sqlstore.EventAcquired, ""
		case prev.Event == sqlstore.EventReleased:
			return sqlstore.EventAcquired, fmt.Sprintf("%s released epoch %d", prev.Holder, prev.Epoch)
		case prev.Event == sqlstore.EventLost:
			return sqlstore.EventAcquired, fmt.Sprintf("%s lost epoch %d", prev.Holder, prev.Epoch)
		}
		wait := r.cfg.Settle - time.Since(c.at)
		if settled || r.cfg.Settle < 0 || wait <= 0 {
			return sqlstore.EventTakenOver, fmt.Sprintf("the lease of %s (epoch %d) expired without a release", prev.Holder, prev.Epoch)
		}
		settled = true
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

func (r *Recorder) last(ctx context.Context, lease string) (sqlstore.LeaseEvent, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
	defer cancel()
	es, err := r.cfg.Store.LeaseHistory(rctx, lease, 0, 1)
	if err != nil {
		return sqlstore.LeaseEvent{}, err
	}
	if len(es) == 0 {
		return sqlstore.LeaseEvent{}, errors.New("no history")
	}
	return es[0], nil
}

func (r *Recorder) prune(ctx context.Context) {
	r.mu.Lock()
	leading := false
	for _, l := range r.leading {
		leading = leading || l
	}
	r.mu.Unlock()
	if !leading {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	defer cancel()
	if n, err := r.cfg.Store.PruneLeaseHistory(pctx, r.cfg.Retention); err != nil {
		r.log.Warn("lease_history_prune_failed", slog.String("error", err.Error()))
	} else if n > 0 {
		r.log.Info("lease_history_pruned", slog.Int64("deleted", n), slog.Duration("retention", r.cfg.Retention))
	}
}
