package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// Linearizability of the lease store: concurrent clients acquire, renew,
// release and write under the fence of one lease, each operation recorded
// with its invocation and return times, and porcupine checks that the
// history is that of some sequential lease — every operation taking effect
// at one instant between its call and its return.
//
// Time: the leases last a minute, longer than any history, so a lease ends
// only by its release and the sequential model needs no clock. Expiry in
// database time is covered by the other conformance tests.

// leaseOp is one operation's input: its kind and the token it carries
// (Acquire carries the holder only).
type leaseOp struct {
	kind string // "acquire", "renew", "release", "fenced"
	tok  sqlease.Token
}

// leaseOut is an operation's outcome: ok, and for an acquire the epoch it
// got.
type leaseOut struct {
	ok    bool
	epoch int64
}

// leaseState is the sequential lease: held by holder under epoch, or free
// (the epoch of the last term stays: the next acquire increments it).
type leaseState struct {
	held   bool
	holder string
	epoch  int64
}

// LeaseModel is the sequential specification porcupine checks histories
// against.
var LeaseModel = porcupine.Model{
	Init: func() interface{} { return leaseState{} },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		s, in, out := state.(leaseState), input.(leaseOp), output.(leaseOut)
		current := s.held && in.tok.Holder == s.holder && in.tok.Epoch == s.epoch
		switch in.kind {
		case "acquire":
			if s.held {
				return !out.ok, s // held: refused
			}
			next := leaseState{held: true, holder: in.tok.Holder, epoch: s.epoch + 1}
			return out.ok && out.epoch == next.epoch, next
		case "renew", "fenced":
			return out.ok == current, s
		case "release":
			if current {
				return out.ok, leaseState{epoch: s.epoch}
			}
			return !out.ok, s
		}
		return false, s
	},
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(leaseOp), output.(leaseOut)
		return fmt.Sprintf("%s(%s@%d) → ok=%v epoch=%d", in.kind, in.tok.Holder, in.tok.Epoch, out.ok, out.epoch)
	},
}

// testLinearizable runs clients goroutines, each with a holder id of its
// own, for ops operations each against one lease, and checks the history.
func testLinearizable(t *testing.T, s *sqlstore.Store) {
	const clients, ops = 6, 60
	const name, ttl = "linearizable", time.Minute
	ctx := t.Context()
	start := time.Now()
	var mu sync.Mutex
	var history []porcupine.Operation
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("client-%d", c)
			var tok sqlease.Token // the last term this client acquired
			rng := rand.New(rand.NewPCG(uint64(c), 42))
			for range ops {
				in := leaseOp{kind: "acquire", tok: sqlease.Token{Name: name, Holder: holder}}
				if tok.Epoch != 0 {
					in = leaseOp{kind: []string{"renew", "fenced", "fenced", "release", "acquire"}[rng.IntN(5)], tok: tok}
					if in.kind == "acquire" {
						in.tok = sqlease.Token{Name: name, Holder: holder}
					}
				}
				call := time.Since(start).Nanoseconds()
				out, err := apply(ctx, s, in, ttl)
				ret := time.Since(start).Nanoseconds()
				if err != nil {
					errs <- fmt.Errorf("%s by %s: %w", in.kind, holder, err)
					return
				}
				switch {
				case in.kind == "acquire" && out.ok:
					tok = sqlease.Token{Name: name, Holder: holder, Epoch: out.epoch}
				case in.kind == "release" && out.ok, !out.ok && in.kind != "acquire":
					tok = sqlease.Token{} // released, or no longer current
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkHistory(t, history)
	// The history must have exercised the lease: terms changed hands.
	var acquired, refused int
	for _, op := range history {
		if op.Input.(leaseOp).kind == "acquire" {
			if op.Output.(leaseOut).ok {
				acquired++
			} else {
				refused++
			}
		}
	}
	if acquired < 2 || refused == 0 {
		t.Fatalf("a history of %d operations with %d successful and %d refused acquires: not enough contention to check", len(history), acquired, refused)
	}
	t.Logf("linearizable: %d operations from %d clients, %d terms, %d acquires refused", len(history), clients, acquired, refused)
}

// apply runs one operation on the store; a refusal by the lease (held, lost,
// fence failed) is an outcome, any other error a failure of the test.
func apply(ctx context.Context, s *sqlstore.Store, in leaseOp, ttl time.Duration) (leaseOut, error) {
	var err error
	switch in.kind {
	case "acquire":
		var l sqlease.Lease
		l, err = s.Acquire(ctx, in.tok.Name, in.tok.Holder, ttl)
		if err == nil {
			return leaseOut{ok: true, epoch: l.Epoch}, nil
		}
		if errors.Is(err, sqlease.ErrLeaseHeld) {
			return leaseOut{}, nil
		}
	case "renew":
		_, err = s.Renew(ctx, in.tok, ttl)
	case "release":
		err = s.Release(ctx, in.tok)
	case "fenced":
		err = s.Fenced(ctx, in.tok, func(tx *sql.Tx) error { return nil })
	}
	switch {
	case err == nil:
		return leaseOut{ok: true}, nil
	case errors.Is(err, sqlease.ErrLeaseLost), errors.Is(err, sqlease.ErrFenceFailed):
		return leaseOut{}, nil
	}
	return leaseOut{}, err
}

// checkHistory fails t unless history is linearizable; on failure it
// writes porcupine's visualization into the test's temporary directory.
func checkHistory(t *testing.T, history []porcupine.Operation) {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(LeaseModel, history, 30*time.Second)
	switch res {
	case porcupine.Ok:
		return
	case porcupine.Unknown:
		t.Fatalf("porcupine could not decide within 30s on a history of %d operations", len(history))
	}
	path := filepath.Join(t.TempDir(), "history.html")
	if f, err := os.Create(path); err == nil {
		_ = porcupine.Visualize(LeaseModel, info, f)
		f.Close()
	}
	t.Fatalf("the lease store's history of %d operations is not linearizable (visualization: %s)", len(history), path)
}
