package fleettest

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// EnvInt is the positive integer in the environment variable name (how
// many trials, repetitions or failovers a suite runs on request), def when
// it is unset; anything else fails the test.
func EnvInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// EnvDuration is EnvInt for a positive duration ("30s").
func EnvDuration(t testing.TB, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", name, v)
	}
	return d
}
