//go:build !linux

package action

import (
	"os"
	"os/exec"
)

// startSupervised puts the command in a process group of its own where
// there are process groups; without Linux's parent-death signal it may
// outlive a node that is killed.
func startSupervised(cmd *exec.Cmd) { setProcessGroup(cmd) }

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
