// Package testserver is how every throwaway test server starts, in one
// place: pgtest's PostgreSQL (and its streaming replica), mysqltest's
// MariaDB and hacluster's Patroni/etcd cluster each take a directory
// (Dir), run as the server's OS user when the test runs as root (OSUser),
// listen on a free loopback port (FreePort), name the databases of tests
// alike (DatabaseName), and leave nothing behind should the test process
// die without its cleanups (Watchdog). scripts/test.sh starts the suite's
// shared servers the same way in shell.
package testserver

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Dir makes a server's directory, named prefix…: on the tmpfs /dev/shm when
// it can (initdb writes about a thousand files: 1.4 s on ext4, 0.35 s
// there), else under /tmp (not TMPDIR, which the server's OS user might not
// enter). With uid ≥ 0 the directory is given to that user.
func Dir(prefix string, uid, gid int) (string, error) {
	dir, err := os.MkdirTemp("/dev/shm", prefix)
	if err != nil {
		if dir, err = os.MkdirTemp("/tmp", prefix); err != nil {
			return "", err
		}
	}
	if uid >= 0 {
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

var userMu sync.Mutex

// OSUser returns the uid and gid of the OS user name (postgres, mysql),
// creating it as a system user if it is missing: run as root, the servers
// refuse to run as root or drop to that user.
func OSUser(name string) (uid, gid int, err error) {
	userMu.Lock()
	defer userMu.Unlock()
	var out []byte
	for attempt := 0; attempt < 5; attempt++ {
		if u, lerr := user.Lookup(name); lerr == nil {
			uid, err1 := strconv.Atoi(u.Uid)
			gid, err2 := strconv.Atoi(u.Gid)
			if err1 != nil || err2 != nil {
				return 0, 0, fmt.Errorf("user %s has non-numeric uid/gid %q/%q", name, u.Uid, u.Gid)
			}
			return uid, gid, nil
		}
		// Another test process may be creating it at the same time (useradd
		// then fails on the lock or "already exists"): look again.
		out, err = exec.Command("useradd", "--system", "--no-create-home", name).CombinedOutput()
		if err != nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return 0, 0, fmt.Errorf("cannot create OS user %s (the server runs as it when the test runs as root): %v\n%s", name, err, out)
}

// FreePort returns a TCP port on 127.0.0.1 that is free right now. Another
// process may take it before the server binds it: a server's start retries
// on another port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreeAddr returns "127.0.0.1:<port>" with a port that is free right now
// (FreePort), for a node the test starts; it fails t when there is none.
func FreeAddr(t testing.TB) string {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// DatabaseName makes a valid, unique database name (at most 63 bytes, for
// PostgreSQL and MySQL alike) that hints at the test that created it.
func DatabaseName(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		if b.Len() == 40 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	return "sqlease_" + b.String() + "_" + hex.EncodeToString(rnd[:])
}

// watchdogScript runs as long as the test process: its stdin is a pipe only
// the test holds. A line means the test cleaned up itself; end of file
// without one means the test process died: run the server's kill script
// ($2, with $1 the directory), then remove the directory.
const watchdogScript = `
if read -r _; then exit 0; fi
sh -c "$2" kill "$1"
rm -rf "$1"
`

// StartLifeline starts cmd with its stdin a pipe only the test process
// holds, and returns the pipe's writing end: what cmd reads there is the
// test's word, and end of file the test process's death. cmd gets a process
// group of its own: a Ctrl-C in the terminal reaches the test process, not
// cmd, which hears of it by its lifeline.
func StartLifeline(cmd *exec.Cmd) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// Watchdog starts a shell that, should the test process die without calling
// the returned stop (a go test -timeout panic, SIGKILL, Ctrl-C), runs kill
// (a shell script; $1 is dir) and removes dir. A server that drops root for
// its own OS user loses its parent-death signal: this is what stops it.
func Watchdog(dir, kill string) (stop func(), err error) {
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "sqlease-test-watchdog", dir, kill)
	w, err := StartLifeline(cmd)
	if err != nil {
		return nil, fmt.Errorf("starting the watchdog: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	var once sync.Once
	return func() {
		once.Do(func() {
			_, _ = w.WriteString("stop\n")
			w.Close()
		})
	}, nil
}
