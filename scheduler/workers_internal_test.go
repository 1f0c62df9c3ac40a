package scheduler

import (
	"bytes"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// goid is the calling goroutine's id, from its stack trace's header.
func goid() int {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	f := bytes.Fields(b)
	id, _ := strconv.Atoi(string(f[1]))
	return id
}

// goroutineLives reports whether a goroutine of this id exists.
func goroutineLives(id int) bool {
	b := make([]byte, 1<<20)
	b = b[:runtime.Stack(b, true)]
	return bytes.Contains(b, []byte("goroutine "+strconv.Itoa(id)+" ["))
}

// TestRunWorkersKeepGoroutines: a run that starts after another has
// finished goes to the goroutine that ran it (whose stack has grown),
// runs in flight together each get one, and close ends the idle ones.
func TestRunWorkersKeepGoroutines(t *testing.T) {
	p := newRunWorkers()
	ids := make(chan int)
	seen := map[int]bool{}
	const runs = 200
	for range runs {
		p.run(func() { ids <- goid() })
		seen[<-ids] = true
		// The worker waits for the next run just after its run returns:
		// give it the chance to (a run that finds none idle starts one).
		runtime.Gosched()
	}
	if len(seen) > runs/4 {
		t.Fatalf("%d runs, one after another, ran on %d goroutines: the workers keep few or none", runs, len(seen))
	}
	var first int
	for id := range seen {
		first = id
	}

	// Two runs in flight at once have a goroutine each.
	release := make(chan struct{})
	for range 2 {
		p.run(func() { ids <- goid(); <-release })
	}
	a, b := <-ids, <-ids
	close(release)
	if a == b {
		t.Fatalf("two runs in flight at once on goroutine %d", a)
	}

	p.close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if !goroutineLives(a) && !goroutineLives(b) && !goroutineLives(first) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("workers still live 5 s after close (they end when idle for 10 s)")
		}
	}
}
