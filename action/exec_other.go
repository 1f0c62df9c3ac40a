//go:build !unix

package action

import (
	"errors"
	"fmt"
	"os/exec"
)

// setProcessGroup does nothing: process groups are a Unix feature, so on
// other systems only the command itself is killed, not what it started.
func setProcessGroup(*exec.Cmd) {}

// killProcessGroup kills the command.
func killProcessGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}

// SetExecUser is not supported here: actions run as the daemon's user.
func SetExecUser(name string) error {
	if name != "" {
		return errors.New("exec_user: running actions as another user needs a Unix system")
	}
	return nil
}

// exitCause names how a command ended: "exit status N".
func exitCause(e *exec.ExitError) string { return fmt.Sprintf("exit status %d", e.ExitCode()) }
