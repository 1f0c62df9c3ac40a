package action

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// group is sleep 30 in a process group of its own.
type group struct {
	pid  int
	done chan struct{} // closed when it has exited
}

func startGroup(t *testing.T) group {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := group{cmd.Process.Pid, make(chan struct{})}
	go func() { _ = cmd.Wait(); close(g.done) }()
	t.Cleanup(func() { _ = syscall.Kill(-g.pid, syscall.SIGKILL); <-g.done })
	return g
}

// exited reports whether g exits within d.
func (g group) exited(d time.Duration) bool {
	select {
	case <-g.done:
		return true
	case <-time.After(d):
		return false
	}
}

// The guard kills a group at its deadline, moved on by a later line; not
// one it was told ended; and every group it still watches when the node's
// side closes.
func TestGuardKillsAtDeadlineAndOnNodeEnd(t *testing.T) {
	late, ended, moved, left := startGroup(t), startGroup(t), startGroup(t), startGroup(t)
	msgs := make(chan guardMsg)
	ret := make(chan int)
	go func() { ret <- guard(msgs) }()
	ms := int64(time.Millisecond)
	msgs <- guardMsg{watch: true, pgid: late.pid, deadline: monoNow() + 200*ms}
	msgs <- guardMsg{watch: true, pgid: ended.pid, deadline: monoNow() + 200*ms}
	msgs <- guardMsg{watch: true, pgid: moved.pid, deadline: monoNow() + 200*ms}
	msgs <- guardMsg{watch: true, pgid: left.pid, deadline: monoNow() + time.Hour.Nanoseconds()}
	msgs <- guardMsg{pgid: ended.pid}
	msgs <- guardMsg{watch: true, pgid: moved.pid, deadline: monoNow() + 1500*ms}
	start := time.Now()
	if !late.exited(5 * time.Second) {
		t.Fatal("the group past its deadline still runs")
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Errorf("killed %v after its deadline was set 200ms ahead", took)
	}
	if ended.exited(300*time.Millisecond) || moved.exited(300*time.Millisecond) {
		t.Fatal("a group the guard was told ended, or whose deadline moved on, was killed at the first deadline")
	}
	if !moved.exited(5 * time.Second) {
		t.Fatal("the group past its moved deadline still runs")
	}
	if left.exited(100 * time.Millisecond) {
		t.Fatal("a group an hour from its deadline was killed")
	}
	close(msgs) // the node is gone
	if code := <-ret; code != 0 {
		t.Fatalf("guard returned %d", code)
	}
	if !left.exited(5 * time.Second) {
		t.Fatal("a watched group outlived the node's side")
	}
	if ended.exited(100 * time.Millisecond) {
		t.Fatal("the group the guard was told ended was killed")
	}
}

// The node's side: the guard process starts with the first watch, kills a
// watched group at its deadline but not one whose watch ended, ignores the
// signals of a service stop, and comes back when it dies, with the watches
// it had.
func TestGuardianProcess(t *testing.T) {
	SetExecGuard([]string{os.Args[0], GuardArg}) // TestMain runs RunGuard
	defer SetExecGuard(nil)
	defer nodeGuard.shutdown()
	ended, late, later := startGroup(t), startGroup(t), startGroup(t)
	fixed := func(d time.Duration) func() (time.Time, bool) {
		at := time.Now().Add(d)
		return func() (time.Time, bool) { return at, true }
	}
	watch := func(g group, d time.Duration) func() {
		t.Helper()
		w, err := prepareGuard(fixed(d))
		if err != nil {
			t.Fatal(err)
		}
		stop, err := w.start(&exec.Cmd{Process: &os.Process{Pid: g.pid}})
		if err != nil {
			t.Fatal(err)
		}
		return stop
	}
	watch(ended, 300*time.Millisecond)()
	defer watch(late, 300*time.Millisecond)()
	if late.exited(3*time.Second) == false {
		t.Fatal("the watched group outlived its deadline")
	}
	if ended.exited(200 * time.Millisecond) {
		t.Fatal("a group whose watch ended was killed")
	}
	// A service manager's stop signals every process of the service: the
	// guard stays, and leaves the group to the node's graceful stop.
	defer watch(later, 1500*time.Millisecond)()
	nodeGuard.mu.Lock()
	first := nodeGuard.pid
	nodeGuard.mu.Unlock()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		if err := syscall.Kill(first, sig); err != nil {
			t.Fatal(err)
		}
	}
	if later.exited(300 * time.Millisecond) {
		t.Fatal("the guard killed a group before its deadline on SIGTERM, SIGINT or SIGHUP")
	}
	nodeGuard.mu.Lock()
	same := nodeGuard.pid
	nodeGuard.mu.Unlock()
	if same != first {
		t.Fatalf("the guard did not survive SIGTERM, SIGINT and SIGHUP: pid %d, was %d", same, first)
	}
	// The guard dies; the next one gets the watch of later.
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !later.exited(5 * time.Second) {
		t.Fatal("after the guard died, the group it watched outlived its deadline")
	}
	nodeGuard.mu.Lock()
	second := nodeGuard.pid
	nodeGuard.mu.Unlock()
	if second == first || second == 0 {
		t.Fatalf("no new guard: pid %d, was %d", second, first)
	}
}
