package scheduler

import (
	"context"
	"strconv"
	"sync"
	"unicode/utf8"
)

// Run output: what a run's handler hands over with SetOutput is written with
// the run's outcome, in the same fenced transaction (sqlstore.Finish.Output),
// so a run that lost its lock or lease keeps none, and is returned with the
// run by Runs. The daemon's actions keep the tail of a command's stdout and
// stderr, or an HTTP response's status and body, this way.
const (
	// DefaultOutputLimit is how many bytes of a run's output are kept by
	// default: the last 64 KiB.
	DefaultOutputLimit = 64 << 10
	// MaxOutputLimit bounds Config.OutputLimit: a page of runs carries the
	// output of each, and a batch finish writes up to 512 at once.
	MaxOutputLimit = 1 << 20
)

type outputKey struct{}

// outputSlot is where a run's handler leaves its output.
type outputSlot struct {
	limit int
	mu    sync.Mutex
	out   string
}

// OutputLimit returns how many bytes of output the run executing in ctx
// keeps (Config.OutputLimit): 0 outside a run of a Scheduler, or when the
// scheduler keeps none. A handler that produces output in bulk captures
// only that much of its tail.
func OutputLimit(ctx context.Context) int {
	if s, ok := ctx.Value(outputKey{}).(*outputSlot); ok {
		return s.limit
	}
	return 0
}

// SetOutput sets the output kept with the run executing in ctx, replacing
// any set before; it is stored with the run's outcome. Output longer than
// OutputLimit keeps its tail, cut on a character boundary and preceded by
// OutputDropped's marker; invalid UTF-8 is stored as U+FFFD. Outside a run
// of a Scheduler, or when the scheduler keeps no output, it does nothing.
// The output is stored and shown as given: leave secrets out of it.
func SetOutput(ctx context.Context, out string) { SetOutputTail(ctx, out, 0) }

// SetOutputTail is SetOutput for the tail of a longer output whose first
// dropped bytes the handler left out already (it kept only OutputLimit's
// worth): the marker counts them too.
func SetOutputTail(ctx context.Context, tail string, dropped int64) {
	s, ok := ctx.Value(outputKey{}).(*outputSlot)
	if !ok || s.limit <= 0 {
		return
	}
	tail, cut := cutTail(tail, s.limit)
	if dropped += int64(cut); dropped > 0 {
		tail = OutputDropped(dropped) + tail
	}
	s.mu.Lock()
	s.out = tail
	s.mu.Unlock()
}

func (s *outputSlot) get() string {
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out
}

// TailOutput returns out when it has at most limit bytes, else its last
// limit bytes or fewer (starting on a character boundary) preceded by
// OutputDropped's marker for the bytes left out. limit <= 0 keeps nothing.
func TailOutput(out string, limit int) string {
	if limit <= 0 {
		return ""
	}
	tail, cut := cutTail(out, limit)
	if cut == 0 {
		return out
	}
	return OutputDropped(int64(cut)) + tail
}

// cutTail returns the last limit bytes of out or fewer, starting on a
// character boundary, and how many bytes it left out.
func cutTail(out string, limit int) (string, int) {
	if len(out) <= limit {
		return out, 0
	}
	cut := len(out) - limit
	for i := 0; i < utf8.UTFMax-1 && cut < len(out) && !utf8.RuneStart(out[cut]); i++ {
		cut++
	}
	return out[cut:], cut
}

// OutputDropped is the marker that starts a kept output whose first n bytes
// were dropped: "[… n bytes dropped]\n".
func OutputDropped(n int64) string {
	return "[… " + strconv.FormatInt(n, 10) + " bytes dropped]\n"
}

// WithOutput returns a context in which a handler's SetOutput is kept as a
// Scheduler would keep it under OutputLimit limit, and a function that
// returns what was kept: for running a handler outside a Scheduler (its
// tests, a tool).
func WithOutput(ctx context.Context, limit int) (context.Context, func() string) {
	s := &outputSlot{limit: max(limit, 0)}
	return context.WithValue(ctx, outputKey{}, s), s.get
}
