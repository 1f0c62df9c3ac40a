package testserver

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDatabaseName: at most 63 bytes (PostgreSQL's limit, below MySQL's 64),
// only lower-case letters, digits and _, and unique.
func TestDatabaseName(t *testing.T) {
	long := "TestSomething/with spaces and a very long name that goes on and on"
	n := DatabaseName(long)
	if len(n) > 63 {
		t.Errorf("database name %q longer than 63 bytes", n)
	}
	if strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
		t.Errorf("database name %q has other characters than [a-z0-9_]", n)
	}
	if DatabaseName(long) == n {
		t.Errorf("two database names for one test are equal: %q", n)
	}
}

// TestWatchdog: stop keeps the directory; the test process's end without
// stop runs the kill script and removes it.
func TestWatchdog(t *testing.T) {
	kept, err := Dir("sqlease-testserver-", -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(kept)
	stop, err := Watchdog(kept, `touch "$1/killed"`)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	stop() // once only
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(kept); err != nil {
		t.Fatalf("after stop the directory is gone: %v", err)
	}
	if _, err := os.Stat(kept + "/killed"); err == nil {
		t.Fatal("after stop the kill script ran")
	}
}

// TestWatchdogDeath: a process that dies without stop leaves its watchdog
// to run the kill script and remove the directory.
func TestWatchdogDeath(t *testing.T) {
	if dir := os.Getenv("SQLEASE_TESTSERVER_HELPER_DIR"); dir != "" {
		if _, err := Watchdog(dir, `touch "$1.killed"`); err != nil {
			t.Fatal(err)
		}
		os.Exit(0) // no cleanups, no stop
	}
	dir, err := Dir("sqlease-testserver-", -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	defer os.Remove(dir + ".killed")
	cmd := exec.Command(os.Args[0], "-test.run=^TestWatchdogDeath$")
	cmd.Env = append(os.Environ(), "SQLEASE_TESTSERVER_HELPER_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, errDir := os.Stat(dir)
		_, errKilled := os.Stat(dir + ".killed")
		if os.IsNotExist(errDir) && errKilled == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the helper died: directory %v, kill script %v; want removed and run", errDir, errKilled)
		}
	}
}
