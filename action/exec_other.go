//go:build !unix

package action

import "os/exec"

// setProcessGroup does nothing: process groups are a Unix feature, so on
// other systems only the command itself is killed, not what it started.
func setProcessGroup(*exec.Cmd) {}

// killProcessGroup kills the command.
func killProcessGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}
