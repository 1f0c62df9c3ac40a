package storetest

import (
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/sqlease/sqlease"
)

// TestLeaseModelRefutes: the checker can fail. Histories no lease can
// produce are refused: two acquires that both succeed without a release
// between them, a renew by a term that was released before it was called,
// and an acquire that skips an epoch; their correct counterparts pass.
func TestLeaseModelRefutes(t *testing.T) {
	tok := func(h string, e int64) sqlease.Token { return sqlease.Token{Name: "l", Holder: h, Epoch: e} }
	op := func(c int, kind string, tk sqlease.Token, call, ret int64, ok bool, epoch int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: leaseOp{kind: kind, tok: tk}, Call: call, Output: leaseOut{ok: ok, epoch: epoch}, Return: ret}
	}
	cases := []struct {
		name string
		ok   bool
		h    []porcupine.Operation
	}{
		{"two holders at once", false, []porcupine.Operation{
			op(0, "acquire", tok("a", 0), 0, 10, true, 1),
			op(1, "acquire", tok("b", 0), 20, 30, true, 2),
		}},
		{"acquire after a release", true, []porcupine.Operation{
			op(0, "acquire", tok("a", 0), 0, 10, true, 1),
			op(0, "release", tok("a", 1), 11, 15, true, 0),
			op(1, "acquire", tok("b", 0), 20, 30, true, 2),
		}},
		{"overlapping release and acquire, either order", true, []porcupine.Operation{
			op(0, "acquire", tok("a", 0), 0, 10, true, 1),
			op(0, "release", tok("a", 1), 11, 40, true, 0),
			op(1, "acquire", tok("b", 0), 20, 30, true, 2),
		}},
		{"renew of a released term succeeds", false, []porcupine.Operation{
			op(0, "acquire", tok("a", 0), 0, 10, true, 1),
			op(0, "release", tok("a", 1), 11, 15, true, 0),
			op(0, "renew", tok("a", 1), 20, 30, true, 0),
		}},
		{"fenced write of a deposed term commits", false, []porcupine.Operation{
			op(0, "acquire", tok("a", 0), 0, 10, true, 1),
			op(0, "release", tok("a", 1), 11, 15, true, 0),
			op(1, "acquire", tok("b", 0), 16, 18, true, 2),
			op(0, "fenced", tok("a", 1), 20, 30, true, 0),
		}},
		{"an epoch skipped", false, []porcupine.Operation{
			op(0, "acquire", tok("a", 0), 0, 10, true, 2),
		}},
	}
	for _, c := range cases {
		if got := porcupine.CheckOperations(LeaseModel, c.h); got != c.ok {
			t.Errorf("%s: linearizable = %v, want %v", c.name, got, c.ok)
		}
	}
}
