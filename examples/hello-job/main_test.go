package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The program runs the job three times as leader, then Lead returns (its
// term ended) and Run releases the lease.
func TestHelloJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, filepath.Join(t.TempDir(), "hello.db"), 3, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"created job hello\n", "leading under epoch 1\n", "run hello/", "Lead returned: "} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "run hello/"); n < 3 {
		t.Errorf("%d runs, want at least 3:\n%s", n, got)
	}
	if strings.Index(got, "Lead returned") < strings.LastIndex(got, "run hello/") {
		t.Errorf("Lead returned before the runs:\n%s", got)
	}
}
