package action

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
)

// stderrGrace is how long a finished command's output pipe may stay open
// (held by a process that left its process group) before it is abandoned.
const stderrGrace = time.Second

// drain copies the read end r of a command's output pipe into w until
// every writer closed it. The function it returns waits for that — at
// most stderrGrace, once the command's group is gone, for a process that
// left the group holding the pipe — then ends the read and closes r.
func drain(r *os.File, w io.Writer) (drained func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = r.WriteTo(w)
	}()
	return func() {
		select {
		case <-done:
		case <-time.After(stderrGrace):
			_ = r.SetReadDeadline(time.Now())
			<-done
		}
		r.Close()
	}
}

func (e *Exec) validate() error {
	if len(e.Command) == 0 || e.Command[0] == "" {
		return invalid("action.exec.command", "must name a program: a non-empty array such as [\"/usr/local/bin/report\", \"--daily\"]")
	}
	for i, arg := range e.Command {
		if strings.ContainsRune(arg, 0) {
			return invalid("action.exec.command", "argument %d must not contain NUL", i)
		}
	}
	return validateTimeout("action.exec.timeout", e.Timeout)
}

func (e *Exec) run(ctx context.Context, run sqlease.Run) error {
	actx, cancel, timedOut := withTimeout(ctx, e.Timeout)
	defer cancel()

	cmd := exec.Command(e.Command[0], e.Command[1:]...)
	cmd.Env = execEnv(ctx, run)
	// A process group of its own, and (Linux) SIGKILL from the kernel when
	// the node dies, even by kill -9: an orphaned command would still be
	// acting when the next owner retries the occurrence (SPEC G3).
	startSupervised(cmd)
	// The just-in-time check before the external effect (seed 001).
	if err := scheduler.Ensure(ctx); err != nil {
		return fmt.Errorf("exec action not started: %w", err)
	}
	// stdout and stderr are one pipe of our own, so that the output keeps
	// the order in which the command wrote it, and so that Wait returns
	// when the command exits rather than when the last process holding
	// the pipe does; the group is killed then and the pipe drained.
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("exec action: %w", err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	// Should this node be frozen, the guard stops the command at the run's
	// acting deadline (SetExecGuard).
	guard, err := prepareGuard(func() (time.Time, bool) { return scheduler.ActDeadline(ctx) })
	if err != nil {
		r.Close()
		w.Close()
		return fmt.Errorf("exec action not started: its guard: %w", err)
	}
	unlock := lockThread() // the parent-death signal follows the thread that forked the command
	defer unlock()
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return fmt.Errorf("exec action: start: %w", err)
	}
	stopGuard, err := guard.start(cmd)
	if err != nil {
		killProcessGroup(cmd)
		_ = cmd.Wait()
		r.Close()
		return fmt.Errorf("exec action: start its guard: %w", err)
	}
	defer stopGuard()
	secrets := newSecretSet(append(append(nodeSecrets(), ArgSecrets(e.Command)...), runSecrets(ctx)...)...)
	out := newCapture(scheduler.OutputLimit(ctx), secrets)
	tail := newCapture(MaxErrorOutput, secrets) // the error's last line
	drained := drain(r, io.MultiWriter(out, tail))

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var waitErr error
	select {
	case waitErr = <-waited:
	case <-actx.Done():
		killProcessGroup(cmd)
		waitErr = <-waited
	}
	// Whatever the command left running in its group goes with it. (The
	// leader is reaped, but its id cannot be reused while the group has
	// members; with none left the kill finds nothing.)
	killProcessGroup(cmd)
	drained()
	out.keepFor(ctx)

	var exitErr *exec.ExitError
	switch {
	case waitErr == nil:
		return nil // it exited 0 by itself, even if the timeout fired since
	case timedOut():
		return &failure{fmt.Sprintf("exec action: timed out after %s (killed)", timeoutOrDefault(e.Timeout)), ErrTimeout}
	case ctx.Err() != nil:
		return stopped("exec", ctx)
	case errors.As(waitErr, &exitErr):
		msg := "exec action: " + exitCause(exitErr)
		if line := tail.lastLine(MaxErrorOutput); line != "" {
			msg += ": " + line
		}
		return &failure{msg, exitErr}
	default:
		return fmt.Errorf("exec action: %w", waitErr)
	}
}

// failure is an action's failure as one line naming its cause (exit
// status, signal, timeout, HTTP status) and at most a line of the output;
// it matches err (errors.Is and As).
type failure struct {
	msg string
	err error
}

func (f *failure) Error() string { return f.msg }
func (f *failure) Unwrap() error { return f.err }

// execEnv is the daemon's environment without its SQLEASE_* variables, plus
// the run's.
func execEnv(ctx context.Context, run sqlease.Run) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SQLEASE_") {
			env = append(env, kv)
		}
	}
	for _, v := range append(runValues(run), callbackValues(ctx, run)...) {
		env = append(env, v.env+"="+v.value)
	}
	return env
}
