package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sqlease/sqlease"
)

// Placement by node (issue 32; the protocol is model/assign.pml): a node's
// liveness is its member lease, MemberLeasePrefix + its holder id, renewed
// once per renew interval whatever it runs; singletons are assigned to
// nodes by their rows (SingletonQueries.Place), and a singleton's fencing
// token is its assignment's generation, which grows at every assignment.
// Every write of a running singleton is one statement fenced by the
// generation and by the node's member lease being live in database time.

// MemberLeasePrefix starts the name of a node's member lease; the rest is
// its holder id (singleton.MemberPrefix is the same).
const MemberLeasePrefix = "member:"

// UpgradeFenceHolder holds the per-singleton lease of the protocol before
// placement by node ("singleton:" + name) of every singleton placed by node,
// so that a node of that older protocol cannot acquire it during a rolling
// upgrade (package singleton, "Rolling upgrade"). Not a node.
const UpgradeFenceHolder = "sqlease:placed-by-node"

// NodePlacement is one live member lease as Placement reads it.
type NodePlacement struct {
	Holder    string
	Epoch     int64
	Assigned  int // unpaused singletons assigned to it under Epoch
	ExpiresAt time.Time
}

// PlacementView is the fleet's placement at one instant of database time.
type PlacementView struct {
	Nodes []NodePlacement
	// Unplaced counts the unpaused singletons whose assignment is not
	// live: unassigned, or their node's lease has expired (or was
	// acquired again under a newer epoch).
	Unplaced int
	Now      time.Time
}

// Assignment is one singleton assigned to a node: its fencing token is
// sqlease.Token{Holder: node, Epoch: Generation}.
type Assignment struct {
	Name       string
	Generation int64
}

func namesArg(names []string) (string, error) {
	if names == nil {
		names = []string{}
	}
	b, err := json.Marshal(names)
	return string(b), err
}

// PlaceSingletons assigns to the member lease tok (holder, epoch) up to
// limit of names whose assignment is not live, in one statement, and
// returns how many it assigned: none when tok is no longer live.
func (s *Store) PlaceSingletons(ctx context.Context, tok sqlease.Token, names []string, limit int) (int64, error) {
	arg, err := namesArg(names)
	if err != nil {
		return 0, err
	}
	n, err := s.affected(s.db.ExecContext(ctx, s.sq().Place, tok.Holder, tok.Epoch, arg, limit))
	if err != nil {
		return 0, fmt.Errorf("place singletons on %s: %w", tok, err)
	}
	return n, nil
}

// GiveSingletons moves names, assigned to the member lease tok, to the live
// member lease of holder `to`, in one statement, while tok is live; it
// returns how many moved (0 when `to` has no live member lease). The bodies
// must have stopped first.
func (s *Store) GiveSingletons(ctx context.Context, tok sqlease.Token, to string, names []string) (int64, error) {
	arg, err := namesArg(names)
	if err != nil {
		return 0, err
	}
	n, err := s.affected(s.db.ExecContext(ctx, s.sq().Give, to, tok.Holder, tok.Epoch, arg))
	if err != nil {
		return 0, fmt.Errorf("give singletons from %s to %q: %w", tok, to, err)
	}
	return n, nil
}

// AssignedSingletons reads the singletons assigned to the member lease tok,
// by name.
func (s *Store) AssignedSingletons(ctx context.Context, tok sqlease.Token) ([]Assignment, error) {
	rows, err := s.db.QueryContext(ctx, s.sq().Assigned, tok.Holder, tok.Epoch)
	var out []Assignment
	if _, err := scanRows(rows, err, func(sc scanner) error {
		var a Assignment
		if err := sc.Scan(&a.Name, &a.Generation); err != nil {
			return err
		}
		out = append(out, a)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read the singletons assigned to %s: %w", tok, s.classify(err))
	}
	return out, nil
}

// Placement reads the live member leases with the number of singletons
// each holds, and the number not placed on a live node, in one statement.
func (s *Store) Placement(ctx context.Context) (PlacementView, error) {
	rows, err := s.db.QueryContext(ctx, s.sq().Placement)
	var v PlacementView
	if _, err := scanRows(rows, err, func(sc scanner) error {
		var holder sql.NullString
		var epoch, n int64
		var exp nullTime
		var now dbTime
		if err := sc.Scan(&holder, &epoch, &n, &exp, &now); err != nil {
			return err
		}
		v.Now = now.T
		if !holder.Valid {
			v.Unplaced += int(n)
			return nil
		}
		v.Nodes = append(v.Nodes, NodePlacement{Holder: holder.String, Epoch: epoch, Assigned: int(n), ExpiresAt: exp.T})
		return nil
	}); err != nil {
		return PlacementView{}, fmt.Errorf("read the singletons' placement: %w", s.classify(err))
	}
	return v, nil
}

// StartAssigned records that tok (holder, generation) starts the singleton,
// only while its assignment is tok and live; else an error wrapping
// sqlease.ErrLeaseLost.
func (s *Store) StartAssigned(ctx context.Context, name string, tok sqlease.Token) error {
	return s.singletonWrite(ctx, s.db, "start singleton "+name, s.sq().StartAssigned, tok, tok.Holder, tok.Epoch, name, tok.Holder, tok.Epoch)
}

// SaveAssigned writes state under tok (holder, generation) in one
// statement fenced by the assignment: the row's run is tok, tok is the
// assignment, and the node's member lease is live in database time. Else
// an error wrapping sqlease.ErrLeaseLost, and nothing changes.
func (s *Store) SaveAssigned(ctx context.Context, name string, tok sqlease.Token, state []byte) error {
	return s.singletonWrite(ctx, s.db, "save singleton "+name, s.sq().SaveAssigned, tok, string(state), name, tok.Holder, tok.Epoch)
}

// HeartbeatAssigned stamps the heartbeat under tok, as SaveAssigned.
func (s *Store) HeartbeatAssigned(ctx context.Context, name string, tok sqlease.Token) error {
	return s.singletonWrite(ctx, s.db, "heartbeat singleton "+name, s.sq().HeartbeatAssigned, tok, name, tok.Holder, tok.Epoch)
}

// FailAssigned is FailSingleton under tok, fenced as SaveAssigned.
func (s *Store) FailAssigned(ctx context.Context, name string, tok sqlease.Token, why string, quick bool) error {
	q := 0
	if quick {
		q = 1
	}
	return s.singletonWrite(ctx, s.db, "record the end of singleton "+name, s.sq().FailAssigned, tok, errorText(why), q, name, tok.Holder, tok.Epoch)
}

// RenewMember renews the member lease tok for ttl and reports only whether
// it did: an error wrapping sqlease.ErrLeaseLost when tok no longer holds
// it. One statement on every dialect — on MySQL and MariaDB Renew's write
// alone, checked by rows affected, where Renew is a transaction of four
// (BEGIN, the write, the read of RenewWR, COMMIT). A node needs nothing
// more: its local deadline runs from the renew's send time (SPEC G1), not
// from the expiry the database computed.
func (s *Store) RenewMember(ctx context.Context, tok sqlease.Token, ttl time.Duration) error {
	if s.d.Queries.RenewWR.Write == "" {
		_, err := s.Renew(ctx, tok, ttl)
		return err
	}
	if err := validateToken(tok); err != nil {
		return err
	}
	if err := sqlease.ValidateTTL(ttl); err != nil {
		return err
	}
	if n, err := s.affected(s.db.ExecContext(ctx, s.d.Queries.RenewWR.Write, ttl.Milliseconds(), tok.Name, tok.Holder, tok.Epoch)); err != nil {
		return fmt.Errorf("renew lease %s: %w", tok, err)
	} else if n == 0 {
		return fmt.Errorf("renew lease %s: %w", tok, sqlease.ErrLeaseLost)
	}
	return nil
}

// FencedAssigned runs fn in a transaction fenced by the assignment tok
// (holder, generation) of singleton name — package singleton's
// Instance.Fenced, for a singleton's writes of its own. The transaction
// begins with HeartbeatAssigned, which changes the row only while its run
// is tok, tok is the assignment and the node's member lease is live in
// database time, and keeps the singleton's row locked to the end, so no
// Place or Give moves the singleton meanwhile; it runs it again just before
// the commit, so that a member lease that expired during fn commits
// nothing. Either refusal returns an error wrapping sqlease.ErrLeaseLost,
// and nothing is committed; an error of fn is returned as is.
func (s *Store) FencedAssigned(ctx context.Context, name string, tok sqlease.Token, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, s.d.TxOptions)
	if err != nil {
		return fmt.Errorf("fenced write of singleton %s under %s: begin: %w", name, tok, s.classify(err))
	}
	// Roll back on every path that does not commit (a panic in fn too):
	// an abandoned transaction would keep the row, or SQLite's database,
	// locked.
	defer func() { _ = tx.Rollback() }()
	fence := func(step string) error {
		if n, err := s.affected(tx.ExecContext(ctx, s.sq().HeartbeatAssigned, name, tok.Holder, tok.Epoch)); err != nil {
			return fmt.Errorf("fenced write of singleton %s under %s: %s: %w", name, tok, step, err)
		} else if n == 0 {
			return fmt.Errorf("fenced write of singleton %s under %s: %s: %w", name, tok, step, sqlease.ErrLeaseLost)
		}
		return nil
	}
	if err := fence("fence"); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := fence("check before commit"); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fenced write of singleton %s under %s: commit: %w", name, tok, s.classify(err))
	}
	return nil
}

// StartManyLimit bounds the singletons StartManyAssigned starts in one
// statement, to keep the JSON argument and the rows one statement locks
// small; a larger batch is split.
const StartManyLimit = 500

type startPair struct {
	N string `json:"n"`
	G int64  `json:"g"`
}

// StartManyAssigned is StartAssigned for each of starts on node holder in
// one statement per StartManyLimit of them (a failover brings hundreds),
// and returns the saved state (nil when none was saved) of each singleton
// it started, by name. A singleton missing from the result was refused,
// as StartAssigned refuses it: its assignment is no longer (holder,
// Generation), or holder's member lease is not live in database time. An
// error means that no batch after the failed one was started; those
// before it were.
func (s *Store) StartManyAssigned(ctx context.Context, holder string, starts []Assignment) (map[string][]byte, error) {
	out := make(map[string][]byte, len(starts))
	for len(starts) > 0 {
		batch := starts[:min(len(starts), StartManyLimit)]
		starts = starts[len(batch):]
		pairs := make([]startPair, len(batch))
		for i, a := range batch {
			pairs[i] = startPair{a.Name, a.Generation}
		}
		b, err := json.Marshal(pairs)
		if err != nil {
			return out, err
		}
		arg := string(b)
		st := returning{query: s.sq().StartMany, args: []any{holder, arg},
			wr: s.sq().StartManyWR, write: []any{holder, holder, arg}, read: []any{holder, arg}}
		if _, err := s.query(ctx, nil, st, func(sc scanner) error {
			var name string
			var state sql.NullString
			if err := sc.Scan(&name, &state); err != nil {
				return err
			}
			out[name] = nil
			if state.Valid {
				out[name] = []byte(state.String)
			}
			return nil
		}); err != nil {
			return out, fmt.Errorf("start %d singletons on %q: %w", len(batch), holder, err)
		}
	}
	return out, nil
}
