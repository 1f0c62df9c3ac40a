package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sqlease/sqlease"
)

// SingletonQueries are the statements of singletons (SPEC §4): one row per
// singleton with its saved state and heartbeat. Every write that a running
// singleton makes happens inside a transaction fenced by the singleton's
// own lease and is also conditional on (holder, epoch), so a deposed
// instance's save changes nothing. Times come from the database clock.
type SingletonQueries struct {
	// Migrations create the table, idempotently.
	Migrations []string
	// Columns are added to a table created by an earlier version (see
	// Queries.Columns): failures, last_error, last_error_at.
	Columns []Column
	// Ensure: (name). Inserts the row (no state, epoch 0) unless it exists.
	Ensure string
	// Get: (name). (state|NULL, state_saved_at|NULL, heartbeat_at|NULL,
	// holder_id|NULL, lease_epoch, started_at|NULL, restarts, spec|NULL,
	// spec_hash|NULL, paused, failures, last_error|NULL,
	// last_error_at|NULL, node_id|NULL, node_epoch, generation, now).
	Get string
	// List: (). (name, then Get's columns) ordered by name.
	List string
	// Page: (after, limit). List's columns for the daemon singletons (spec
	// not NULL) whose names sort after `after`, ordered by name, at most
	// limit rows: a keyset page of GET /v1/singletons.
	Page string
	// Start: (holder, epoch, name). Records a start under (holder, epoch):
	// started_at = heartbeat_at = now, and restarts + 1 unless it is the
	// first start ever (started_at was NULL). Rows affected.
	Start string
	// Fail: (last_error, quick, name, holder, epoch). Records that the run
	// (holder, epoch) started last has ended on its own: last_error,
	// last_error_at = now, and failures = (failures + 1) × quick — quick is
	// 1 for a failed start (the run ended soon after it started), 0 for a
	// run that had lasted. Under the same condition as Save. Rows affected.
	Fail string
	// Save: (state, name, holder, epoch). Writes the state, state_saved_at
	// = heartbeat_at = now, only while the row carries (holder, epoch).
	// Rows affected.
	Save string
	// Heartbeat: (name, holder, epoch). heartbeat_at = now, under the same
	// condition. Rows affected.
	Heartbeat string
	// Create: (name, spec, spec_hash). Inserts a daemon singleton (its spec
	// is the JSON of the API); a unique violation when the name exists.
	Create string
	// SetPaused: (paused, name). Daemon singletons only; rows affected.
	SetPaused string
	// Delete: (name). Daemon singletons only; rows affected.
	Delete string

	// Placement by node (issue 32, model/assign.pml). Each singleton row
	// also carries its assignment: node_id (the node's holder id, NULL when
	// unassigned), node_epoch (the epoch of that node's member lease,
	// MemberLeasePrefix + node_id, when it was assigned) and generation,
	// which grows at every assignment and is the singleton's fencing
	// token. An assignment is live while its node's member lease is live
	// in database time under node_epoch (on PostgreSQL: and of the current
	// timeline). Listed in Columns too, for older tables.

	// Place: (holder, node_epoch, names JSON array, limit). Assigns to
	// holder under node_epoch, only while that member lease is live, up to
	// limit of the named singletons, by name, that are not paused and
	// whose assignment is not live (unassigned, or its node's lease
	// expired or renewed under a newer epoch): generation =
	// max(generation, lease_epoch) + 1 (on PostgreSQL also at least the
	// timeline's first epoch). One statement for every singleton of a dead
	// node. Rows affected.
	Place string
	// Give: (to, holder, node_epoch, names JSON array). Moves the named
	// singletons assigned to holder under node_epoch, while that lease is
	// live, to the live member lease of `to` (generation as Place). Rows
	// affected: 0 when `to` has no live lease.
	Give string
	// Assigned: (holder, node_epoch). (name, generation) of the singletons
	// assigned to holder under node_epoch, by name.
	Assigned string
	// Placement: (). One row per live member lease: (holder, epoch, the
	// number of unpaused singletons assigned to it under that epoch,
	// expires_at, now); then one row (NULL, 0, the number of unpaused
	// singletons whose assignment is not live, NULL, now).
	Placement string
	// StartAssigned: (holder, generation, name, holder, generation). Start
	// (holder_id, lease_epoch := holder, generation), only while the
	// assignment is (holder, generation) and live.
	StartAssigned string
	// StartMany: (holder, pairs JSON array of {"n": name, "g":
	// generation}). StartAssigned of every pair in one statement: each
	// row started (holder_id, lease_epoch := holder, generation) only
	// while its assignment is (holder, generation) and live. Returns
	// (name, state) of the rows it started. StartManyWR where the
	// dialect has no RETURNING: Write (holder, holder, pairs), Read
	// (holder, pairs).
	StartMany   string
	StartManyWR WriteRead
	// SaveAssigned, HeartbeatAssigned, FailAssigned: Save, Heartbeat and
	// Fail with their arguments (the epoch being the generation), only
	// while the row's run is the assignment's (node_id = holder_id,
	// generation = lease_epoch) and the assignment is live: one fenced
	// statement, no lease-fenced transaction.
	SaveAssigned, HeartbeatAssigned, FailAssigned string
}

// SingletonRow is one singleton's stored record.
type SingletonRow struct {
	Name string
	// State is the last saved state (JSON); nil when none was saved.
	State        []byte
	StateSavedAt time.Time
	HeartbeatAt  time.Time
	Holder       string
	Epoch        int64
	StartedAt    time.Time
	Restarts     int64
	// Spec is a daemon singleton's definition (the API's JSON), nil for a
	// library singleton; SpecHash tells an identical definition.
	Spec     []byte
	SpecHash string
	Paused   bool
	// Failures counts the failed starts in a row (runs that ended soon
	// after they started); LastError says why the last run ended, at
	// LastErrorAt ("" and zero when no run ended on its own yet).
	Failures    int64
	LastError   string
	LastErrorAt time.Time
	// Node, NodeEpoch and Generation are the singleton's assignment
	// (Place): "" and zero when it was never assigned.
	Node       string
	NodeEpoch  int64
	Generation int64
	// Now is the database clock at the read.
	Now time.Time
}

func (s *Store) sq() *SingletonQueries { return &s.d.Singletons }

// EnsureSingleton creates the row of singleton name unless it exists.
func (s *Store) EnsureSingleton(ctx context.Context, name string) error {
	if _, err := s.db.ExecContext(ctx, s.sq().Ensure, name); err != nil {
		if s.d.IsUniqueViolation != nil && s.d.IsUniqueViolation(err) {
			return nil // created concurrently
		}
		return fmt.Errorf("create singleton %q: %w", name, s.classify(err))
	}
	return nil
}

func scanSingleton(sc scanner, r *SingletonRow, withName bool) error {
	var state sql.NullString
	var saved, beat, started, failed nullTime
	var holder, spec, hash, lastErr, node sql.NullString
	var now dbTime
	dest := []any{&state, &saved, &beat, &holder, &r.Epoch, &started, &r.Restarts, &spec, &hash, &r.Paused,
		&r.Failures, &lastErr, &failed, &node, &r.NodeEpoch, &r.Generation, &now}
	if withName {
		dest = append([]any{&r.Name}, dest...)
	}
	if err := sc.Scan(dest...); err != nil {
		return err
	}
	if state.Valid {
		r.State = []byte(state.String)
	}
	if spec.Valid {
		r.Spec = []byte(spec.String)
	}
	r.StateSavedAt, r.HeartbeatAt, r.StartedAt, r.Holder, r.SpecHash, r.Now = saved.T, beat.T, started.T, holder.String, hash.String, now.T
	r.LastError, r.LastErrorAt, r.Node = lastErr.String, failed.T, node.String
	return nil
}

// Singleton reads one singleton's record. It returns sqlease.ErrNoJob when
// there is none.
func (s *Store) Singleton(ctx context.Context, name string) (SingletonRow, error) {
	r := SingletonRow{Name: name}
	err := scanSingleton(s.db.QueryRowContext(ctx, s.sq().Get, name), &r, false)
	if errors.Is(err, sql.ErrNoRows) {
		return SingletonRow{}, fmt.Errorf("singleton %q: %w", name, sqlease.ErrNoJob)
	}
	if err != nil {
		return SingletonRow{}, fmt.Errorf("read singleton %q: %w", name, s.classify(err))
	}
	return r, nil
}

// Singletons reads every singleton's record, ordered by name.
func (s *Store) Singletons(ctx context.Context) ([]SingletonRow, error) {
	return s.listSingletons(ctx, "list singletons", s.sq().List)
}

// DaemonSingletons reads up to limit daemon singletons (those with a
// definition) whose names sort after `after`, ordered by name: a page of
// the listing, whose next page starts after the last name returned.
func (s *Store) DaemonSingletons(ctx context.Context, after string, limit int) ([]SingletonRow, error) {
	return s.listSingletons(ctx, fmt.Sprintf("list singletons after %q", after), s.sq().Page, after, limit)
}

// listSingletons reads the singleton records query selects; what names the
// read in its error.
func (s *Store) listSingletons(ctx context.Context, what, query string, args ...any) ([]SingletonRow, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	var out []SingletonRow
	if _, err := scanRows(rows, err, func(sc scanner) error {
		var r SingletonRow
		if err := scanSingleton(sc, &r, true); err != nil {
			return err
		}
		out = append(out, r)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("%s: %w", what, s.classify(err))
	}
	return out, nil
}

// singletonWrite runs one of the conditional singleton writes on q: inside
// the lease-fenced transaction (a *sql.Tx), or on the pool for placement's
// writes, whose statements check the member lease themselves. 0 rows means
// tok no longer runs it.
func (s *Store) singletonWrite(ctx context.Context, q Querier, what, query string, tok sqlease.Token, args ...any) error {
	if n, err := s.affected(q.ExecContext(ctx, query, args...)); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	} else if n == 0 {
		return fmt.Errorf("%s under %s: %w", what, tok, sqlease.ErrLeaseLost)
	}
	return nil
}

// StartSingleton records, in the transaction tx fenced by the singleton's
// lease tok, that tok's holder starts running it.
func (s *Store) StartSingleton(ctx context.Context, tx *sql.Tx, name string, tok sqlease.Token) error {
	return s.singletonWrite(ctx, tx, "start singleton "+name, s.sq().Start, tok, tok.Holder, tok.Epoch, name)
}

// MaxSingletonError bounds the last_error FailSingleton stores, in bytes.
const MaxSingletonError = 2048

// FailSingleton records in tx (fenced by tok's lease) that the run tok's
// holder started last has ended on its own, with why (cut to
// MaxSingletonError bytes of valid UTF-8 without NUL); quick says it ended
// soon after it started (a failed start, counted in Failures), else
// Failures is reset. Like SaveSingleton, only while the row says tok's
// holder and epoch run it; else an error wrapping sqlease.ErrLeaseLost.
func (s *Store) FailSingleton(ctx context.Context, tx *sql.Tx, name string, tok sqlease.Token, why string, quick bool) error {
	q := 0
	if quick {
		q = 1
	}
	return s.singletonWrite(ctx, tx, "record the end of singleton "+name, s.sq().Fail, tok, errorText(why), q, name, tok.Holder, tok.Epoch)
}

// errorText is why as a stored error: valid UTF-8 without NUL (PostgreSQL
// refuses both), at most MaxSingletonError bytes, cut at a character.
func errorText(why string) string {
	why = strings.ReplaceAll(strings.ToValidUTF8(why, "\uFFFD"), "\x00", "")
	if len(why) <= MaxSingletonError {
		return why
	}
	cut := MaxSingletonError - len("…")
	for cut > 0 && !utf8.RuneStart(why[cut]) {
		cut--
	}
	return why[:cut] + "…"
}

// SaveSingleton writes state in tx (fenced by tok's lease), only while the
// row says tok's holder and epoch run it; else an error wrapping
// sqlease.ErrLeaseLost.
func (s *Store) SaveSingleton(ctx context.Context, tx *sql.Tx, name string, tok sqlease.Token, state []byte) error {
	return s.singletonWrite(ctx, tx, "save singleton "+name, s.sq().Save, tok, string(state), name, tok.Holder, tok.Epoch)
}

// HeartbeatSingleton stamps the heartbeat in tx, as SaveSingleton.
func (s *Store) HeartbeatSingleton(ctx context.Context, tx *sql.Tx, name string, tok sqlease.Token) error {
	return s.singletonWrite(ctx, tx, "heartbeat singleton "+name, s.sq().Heartbeat, tok, name, tok.Holder, tok.Epoch)
}

// CreateSingleton inserts a daemon singleton with its spec. When the name
// is taken it returns created=false and the existing row; the caller
// compares SpecHash to tell a retry from a clash.
func (s *Store) CreateSingleton(ctx context.Context, name string, spec []byte, hash string) (SingletonRow, bool, error) {
	_, err := s.db.ExecContext(ctx, s.sq().Create, name, string(spec), hash)
	created := err == nil
	if err != nil && (s.d.IsUniqueViolation == nil || !s.d.IsUniqueViolation(err)) {
		return SingletonRow{}, false, fmt.Errorf("create singleton %q: %w", name, s.classify(err))
	}
	r, err := s.Singleton(ctx, name)
	if err != nil {
		return SingletonRow{}, false, err
	}
	return r, created, nil
}

// SetSingletonPaused pauses or resumes a daemon singleton. It returns
// sqlease.ErrNoJob when there is no daemon singleton of that name.
func (s *Store) SetSingletonPaused(ctx context.Context, name string, paused bool) error {
	return s.singletonAdmin(ctx, "pause singleton "+name, s.sq().SetPaused, paused, name)
}

// DeleteSingleton deletes a daemon singleton and its state. It returns
// sqlease.ErrNoJob when there is no daemon singleton of that name.
func (s *Store) DeleteSingleton(ctx context.Context, name string) error {
	return s.singletonAdmin(ctx, "delete singleton "+name, s.sq().Delete, name)
}

func (s *Store) singletonAdmin(ctx context.Context, what, query string, args ...any) error {
	n, err := s.affected(s.db.ExecContext(ctx, query, args...))
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", what, sqlease.ErrNoJob)
	}
	return nil
}
