//go:build unix

package action

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// execCred is the identity exec actions and singleton processes run as;
// nil runs them as the daemon's user.
var execCred atomic.Pointer[syscall.Credential]

// SetExecUser makes exec actions (and daemon singletons' processes) run as
// the OS user name (its primary group, no supplementary groups): a
// different user cannot read the daemon's files, /proc/<daemon>/environ or
// its memory. It needs the daemon to run as root; "" runs them as the
// daemon's own user.
func SetExecUser(name string) error {
	if name == "" {
		execCred.Store(nil)
		return nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("exec_user: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("exec_user: %s has a non-numeric uid or gid", name)
	}
	if os.Geteuid() != 0 && uint64(os.Geteuid()) != uid {
		return fmt.Errorf("exec_user: running actions as %s needs the daemon to run as root", name)
	}
	execCred.Store(&syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}})
	return nil
}

// setProcessGroup makes the command the leader of a new process group, as
// the exec user when one is set.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: execCred.Load()}
}

// killProcessGroup kills every process in the command's group.
func killProcessGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// exitCause names how a command ended: "exit status N" or "killed by signal
// SIGNAME".
func exitCause(e *exec.ExitError) string {
	if ws, ok := e.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		if name := unix.SignalName(ws.Signal()); name != "" {
			return "killed by signal " + name
		}
		return fmt.Sprintf("killed by signal %d", int(ws.Signal()))
	}
	return fmt.Sprintf("exit status %d", e.ExitCode())
}
