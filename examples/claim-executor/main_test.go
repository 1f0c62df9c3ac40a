package main

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// lines is an io.Writer collecting lines from several goroutines.
type lines struct {
	mu sync.Mutex
	l  []string
}

func (w *lines) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.l = append(w.l, strings.TrimSpace(string(p)))
	return len(p), nil
}

// Two executors share 40 tasks: each task is done once, by one of them.
func TestClaimExecutor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tasks.db")
	out := &lines{}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, holder := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tasks := 0
			if i == 0 {
				tasks = 40
			}
			if err := run(ctx, path, holder, tasks, 20*time.Millisecond, out); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	done := map[string]int{}
	by := map[string]int{}
	for _, l := range out.l {
		f := strings.Fields(l) // "<holder> did <task> …"
		done[f[2]]++
		by[f[0]]++
	}
	if len(done) != 40 {
		t.Fatalf("%d of 40 tasks done", len(done))
	}
	for task, n := range done {
		if n != 1 {
			t.Errorf("%s done %d times", task, n)
		}
	}
	t.Logf("done by: %v", by)
}
