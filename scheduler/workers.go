package scheduler

// growRunStack grows the calling goroutine's stack at once to what a run
// usually reaches. A run is a goroutine of its own, which starts with the
// smallest stack; a daemon's HTTP action (net/http's client, below the
// scheduler's frames) outgrew it two or three times per run, each growth
// copying the whole deep stack frame by frame: 7 % of the daemon's CPU in
// claim mode when delivering thousands of runs a second (sqlease-bench
// -bench daemon, profiled). Called first in the run's goroutine, the one
// copy holds a frame or two; the cost is clearing runStackPad bytes.
//
//go:noinline
func growRunStack() {
	var pad [runStackPad]byte
	touchStack(&pad)
}

// runStackPad makes the first growth reach 16 KiB: a daemon's HTTP run
// needs more than 8 KiB (grown to 8 KiB first, it still grew inside
// net/http, at the same cost as before) and no more than 16.
const runStackPad = 13 << 10

//go:noinline
func touchStack(*[runStackPad]byte) {}
