package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCPUProfile: SQLEASE_CPU_PROFILE's file holds a profile once stopped
// (gzip, as go tool pprof reads it); a path that cannot be created is an
// error naming the variable.
func TestCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	stop, err := startCPUProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Errorf("the profile is %d bytes, not gzip", len(b))
	}
	_, err = startCPUProfile(filepath.Join(t.TempDir(), "missing", "cpu.prof"))
	if err == nil || !strings.Contains(err.Error(), cpuProfileEnv) {
		t.Errorf("profile into a missing directory: %v, want an error naming %s", err, cpuProfileEnv)
	}
}
