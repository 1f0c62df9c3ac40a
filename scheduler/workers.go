package scheduler

import "time"

// runWorkers runs a claim loop's runs, each on a goroutine kept from an
// earlier run where one is idle. A run on a fresh goroutine starts with
// the smallest stack, which a daemon's HTTP action (net/http's client,
// below the scheduler's frames) outgrew two or three times per run, each
// growth copying the run's deep stack frame by frame: 7 % of the daemon's
// CPU per delivery in claim mode (sqlease-bench -bench daemon, profiled),
// and growing it first thing instead still cost 4 % (a fresh 16 KiB stack
// per run, cleared). A kept goroutine keeps its grown stack.
//
// Workers are about as many as the runs in flight at the busiest moment
// (a run that finds none idle, as one is finishing, starts another); one
// idle for runWorkerIdle ends, and all end at close, which comes after
// every run has finished.
type runWorkers struct {
	work chan func() // unbuffered: taken only by an idle worker
	done chan struct{}
}

// runWorkerIdle is how long a worker waits for another run before it ends.
const runWorkerIdle = 10 * time.Second

func newRunWorkers() *runWorkers {
	return &runWorkers{work: make(chan func()), done: make(chan struct{})}
}

// run runs f on an idle worker, or on a new one.
func (p *runWorkers) run(f func()) {
	select {
	case p.work <- f:
	default:
		go p.worker(f)
	}
}

func (p *runWorkers) worker(f func()) {
	growRunStack()
	idle := time.NewTimer(runWorkerIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(runWorkerIdle)
		select {
		case f = <-p.work:
		case <-idle.C:
			return
		case <-p.done:
			return
		}
	}
}

// close ends the idle workers; call it once every run has finished.
func (p *runWorkers) close() { close(p.done) }

// growRunStack grows a new worker's stack at once to what a run usually
// reaches, while it holds a frame or two (a cheap copy): its first run
// does not grow it again.
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
