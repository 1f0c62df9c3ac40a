//go:build !linux

package action

import (
	"os"
	"os/exec"
)

// startSupervised: without Linux's parent-death signal a singleton process
// may outlive a node that is killed.
func startSupervised(cmd *exec.Cmd) {}

func lockThread() func() { return func() {} }

func signalGroup(cmd *exec.Cmd, kill bool) {
	if cmd.Process == nil {
		return
	}
	if kill {
		_ = cmd.Process.Kill()
		return
	}
	_ = cmd.Process.Signal(os.Interrupt)
}
