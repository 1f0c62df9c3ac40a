package action

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
)

// stderrGrace is how long a finished command's stderr may stay open (held by
// a process that left its process group) before it is abandoned.
const stderrGrace = time.Second

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
	cmd.Env = execEnv(run)
	setProcessGroup(cmd)
	// stderr is a pipe of our own rather than an io.Writer, so that Wait
	// returns when the command exits, not when the last process holding
	// its stderr does; the group is killed then and the pipe drained.
	// The just-in-time check before the external effect (seed 001).
	if err := scheduler.Ensure(ctx); err != nil {
		return fmt.Errorf("exec action not started: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("exec action: %w", err)
	}
	cmd.Stderr = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return fmt.Errorf("exec action: start: %w", err)
	}
	tail := &tailBuffer{max: MaxErrorOutput}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_, _ = r.WriteTo(tail)
	}()

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
	select {
	case <-drained:
	case <-time.After(stderrGrace):
		_ = r.SetReadDeadline(time.Now())
		<-drained
	}
	r.Close()

	var exitErr *exec.ExitError
	switch {
	case waitErr == nil:
		return nil // it exited 0 by itself, even if the timeout fired since
	case timedOut():
		return fmt.Errorf("exec action: killed after %s: %w", timeoutOrDefault(e.Timeout), ErrTimeout)
	case ctx.Err() != nil:
		return stopped("exec", ctx)
	case errors.As(waitErr, &exitErr):
		if text := tail.String(); text != "" {
			return fmt.Errorf("exec action: %w: %s", exitErr, text)
		}
		return fmt.Errorf("exec action: %w", exitErr)
	default:
		return fmt.Errorf("exec action: %w", waitErr)
	}
}

// execEnv is the daemon's environment without its SQLEASE_* variables, plus
// the run's.
func execEnv(run sqlease.Run) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SQLEASE_") {
			env = append(env, kv)
		}
	}
	for _, v := range runValues(run) {
		env = append(env, v.env+"="+v.value)
	}
	return env
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	return len(p), nil
}

// String returns the kept bytes, printable, marked with "…" if cut.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := clip(t.buf, t.max, true)
	if t.cut && !strings.HasPrefix(s, "…") {
		s = "…" + s
	}
	return s
}
