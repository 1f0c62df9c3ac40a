package waitfor_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/waitfor"
)

// fatal records what Cond would fail a test with, and ends the goroutine as
// t.Fatalf does.
type fatal struct {
	testing.TB
	msg string
}

func (f *fatal) Helper() {}

func (f *fatal) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func run(d time.Duration, cond func() bool) string {
	f := &fatal{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		waitfor.Cond(f, d, time.Millisecond, "the thing", cond)
	}()
	<-done
	return f.msg
}

// Cond returns once cond holds, polling it; it fails, naming what it waited
// for, once the time is up, and not before.
func TestCond(t *testing.T) {
	calls := 0
	if msg := run(5*time.Second, func() bool { calls++; return calls == 3 }); msg != "" || calls != 3 {
		t.Errorf("a condition true at the third poll: failed %q after %d polls", msg, calls)
	}
	start := time.Now()
	msg := run(50*time.Millisecond, func() bool { return false })
	if took := time.Since(start); !strings.Contains(msg, "waiting for the thing") || took < 50*time.Millisecond {
		t.Errorf("a condition never true: failed %q after %v, want a failure naming it after 50ms", msg, took)
	}
}
