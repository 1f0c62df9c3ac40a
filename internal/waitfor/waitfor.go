// Package waitfor is the one wait of the tests on a condition they poll:
// the test helpers of the stores above the dialects (internal/dbtest) and of
// the dialects' shared suites (storetest) wait through it.
package waitfor

import (
	"testing"
	"time"
)

// Cond polls cond every interval (every) until it holds, and fails the test, naming
// what it waited for, when cond is still false after d.
func Cond(t testing.TB, d, every time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(every)
	}
}
