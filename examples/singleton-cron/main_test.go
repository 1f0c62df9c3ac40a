package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// The singleton's cursor survives a restart: the second run resumes where
// the first one saved, and never goes back.
func TestSingletonResumes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	resumed := regexp.MustCompile(`resumes ingest at offset (\d+)`)
	last := -1
	for i, holder := range []string{"a", "b"} {
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		var out bytes.Buffer
		if err := run(ctx, path, holder, &out); err != nil {
			t.Fatal(err)
		}
		cancel()
		m := resumed.FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("run %d: the singleton did not start:\n%s", i+1, out.String())
		}
		at, _ := strconv.Atoi(m[1])
		if i == 0 && at != 0 || i == 1 && at <= last {
			t.Fatalf("run %d resumed at %d (the run before resumed at %d): the saved cursor was lost", i+1, at, last)
		}
		last = at
	}
}
