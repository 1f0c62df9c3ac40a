package fleettest

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// Timings collects what a package's real-process tests measure (failover
// and reclaim times), by name, for one summary after every test has run:
// WorkersMain prints it, since tests that run in parallel end after any test
// function that could.
type Timings struct {
	mu sync.Mutex
	m  map[string][]time.Duration
}

// Record adds one measurement under key.
func (ts *Timings) Record(key string, d time.Duration) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.m == nil {
		ts.m = map[string][]time.Duration{}
	}
	ts.m[key] = append(ts.m[key], d)
}

// Fprint writes a line per key, in key order: the count, minimum, median and
// maximum, followed by suffix. It writes nothing when nothing was recorded.
func (ts *Timings) Fprint(w io.Writer, suffix string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	keys := make([]string, 0, len(ts.m))
	for k := range ts.m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s := slices.Clone(ts.m[k])
		slices.Sort(s)
		fmt.Fprintf(w, "%s: %d samples: min %v median %v max %v%s\n", k, len(s),
			s[0].Round(time.Millisecond), s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), suffix)
	}
}
