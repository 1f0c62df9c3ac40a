package action

import (
	"os/exec"
	"runtime"
	"syscall"
)

// startSupervised puts the command in a process group of its own and has
// the kernel SIGKILL it when the node dies, even by kill -9 (the command
// itself: what it started in turn is left to it). Start it on a thread
// locked until it exits (lockThread).
func startSupervised(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: execCred.Load()}
}

// lockThread pins the goroutine to its thread while the child runs: the
// parent-death signal fires when the thread that forked the child exits.
func lockThread() func() {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}

// signalGroup sends SIGTERM (or SIGKILL) to the command's process group.
func signalGroup(cmd *exec.Cmd, kill bool) {
	if cmd.Process == nil {
		return
	}
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}
