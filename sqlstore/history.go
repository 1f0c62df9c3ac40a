package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"github.com/sqlease/sqlease"
)

// HistoryQueries are the statements of the leadership history: one row per
// change of hands of a lease (acquired, released, lost, taken over), kept
// in the database so that every node shows the same history and it
// survives restarts. The rows are written by the nodes themselves, best
// effort (HistoryRecorder): the lease row stays the only authority on who
// leads.
type HistoryQueries struct {
	// Migrations create the table and its indexes, idempotently.
	Migrations []string
	// Insert: (lease_name, event, holder_id, lease_epoch, reason, ago_ms).
	// The row's time is the database clock minus ago_ms, the time the event
	// waited in the writer's queue.
	Insert string
	// Page: (lease_name, before_id, limit). (id, event, holder_id,
	// lease_epoch, at, reason) of the lease's rows with id < before_id,
	// newest first.
	Page string
	// Prune: (older_than_ms). Deletes rows older than that; rows affected.
	Prune string
}

// The events of the leadership history.
const (
	EventAcquired  = "acquired"
	EventReleased  = "released"
	EventLost      = "lost"
	EventTakenOver = "taken_over"
	// EventNodeStatus is not a change of hands: a node's readiness and
	// version, recorded under its presence lease's name (NodeLeasePrefix +
	// holder) by history.Presence when they change, so that every node's
	// dashboard can show every node's /readyz without calling it.
	EventNodeStatus = "status"
)

// LeaseEvent is one row of the leadership history.
type LeaseEvent struct {
	// ID orders the rows of one database: a later write has a greater ID.
	ID     int64
	Lease  string
	Event  string // EventAcquired, EventReleased, EventLost, EventTakenOver or EventNodeStatus
	Holder string
	Epoch  int64
	// At is the database clock when the event happened.
	At     time.Time
	Reason string
}

func (s *Store) hq() *HistoryQueries { return &s.d.History }

// RecordLeaseEvent appends e (its ID and At are ignored) to the history;
// ago is how long ago it happened, subtracted from the database clock.
func (s *Store) RecordLeaseEvent(ctx context.Context, e LeaseEvent, ago time.Duration) error {
	if s.hq().Insert == "" {
		return fmt.Errorf("record %s of lease %q: %w: the %s dialect keeps no leadership history", e.Event, e.Lease, sqlease.ErrInvalidConfig, s.d.Name)
	}
	switch e.Event {
	case EventAcquired, EventReleased, EventLost, EventTakenOver, EventNodeStatus:
	default:
		return fmt.Errorf("record lease event: %w: unknown event %q", sqlease.ErrInvalidConfig, e.Event)
	}
	if err := sqlease.ValidateLeaseName(e.Lease); err != nil {
		return err
	}
	reason := e.Reason
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	if _, err := s.db.ExecContext(ctx, s.hq().Insert, e.Lease, e.Event, e.Holder, e.Epoch, reason, max(ago.Milliseconds(), 0)); err != nil {
		return fmt.Errorf("record %s of lease %q: %w", e.Event, e.Lease, s.classify(err))
	}
	return nil
}

// maxReason bounds the stored reason (bytes; a cut may split a character,
// which the reader tolerates).
const maxReason = 500

// LeaseHistory returns up to limit events of lease name with an ID below
// before (0: from the newest), newest first.
func (s *Store) LeaseHistory(ctx context.Context, name string, before int64, limit int) ([]LeaseEvent, error) {
	if err := sqlease.ValidateLeaseName(name); err != nil {
		return nil, err
	}
	if s.hq().Page == "" {
		return nil, nil
	}
	if before <= 0 {
		before = math.MaxInt64
	}
	rows, err := s.db.QueryContext(ctx, s.hq().Page, name, before, limit)
	if err != nil {
		return nil, fmt.Errorf("read the history of lease %q: %w", name, s.classify(err))
	}
	defer rows.Close()
	var out []LeaseEvent
	for rows.Next() {
		e := LeaseEvent{Lease: name}
		var at dbTime
		var holder, reason sql.NullString
		if err := rows.Scan(&e.ID, &e.Event, &holder, &e.Epoch, &at, &reason); err != nil {
			return nil, fmt.Errorf("read the history of lease %q: %w", name, s.classify(err))
		}
		e.Holder, e.At, e.Reason = holder.String, at.T, reason.String
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the history of lease %q: %w", name, s.classify(err))
	}
	return out, nil
}

// PruneLeaseHistory deletes history rows older than retention and reports
// how many.
func (s *Store) PruneLeaseHistory(ctx context.Context, retention time.Duration) (int64, error) {
	return s.pruneOlder(ctx, s.hq().Prune, "the leadership history", retention)
}

// NodeLeasePrefix names the presence lease of a node (NodeLeasePrefix +
// holder id), kept by history.Presence: it shows which nodes are up,
// followers included, and fences nothing.
const NodeLeasePrefix = "node:"
