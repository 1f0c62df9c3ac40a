package ledger_test

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/ledger"
)

// TestUnran: a job that runs while Unran waits is not lost; one that never
// runs is, once the timeout has passed (sorted, with the others lost); with
// everything run Unran returns at once.
func TestUnran(t *testing.T) {
	now := time.Now()
	accepted := map[string]time.Time{"b": now, "a": now, "late": now, "never": now}
	var calls atomic.Int32
	ran := func() map[string]bool {
		m := map[string]bool{}
		if calls.Add(1) > 3 { // "late" runs after a few looks
			m["late"] = true
		}
		return m
	}
	t0 := time.Now()
	lost := ledger.Unran(accepted, 300*time.Millisecond, ran)
	if want := []string{"a", "b", "never"}; !slices.Equal(lost, want) {
		t.Fatalf("Unran = %v, want %v", lost, want)
	}
	if d := time.Since(t0); d < 300*time.Millisecond {
		t.Fatalf("Unran gave up after %v, before its timeout", d)
	}

	t0 = time.Now()
	all := func() map[string]bool { return map[string]bool{"a": true, "b": true, "late": true, "never": true} }
	if lost := ledger.Unran(accepted, 10*time.Second, all); len(lost) != 0 {
		t.Fatalf("Unran = %v with every job run", lost)
	}
	if d := time.Since(t0); d > time.Second {
		t.Fatalf("Unran waited %v with every job run", d)
	}
}
