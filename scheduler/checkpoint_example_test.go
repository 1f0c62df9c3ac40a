package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlite"
)

// A handler saves its progress with Checkpoint; when an attempt does not
// finish (here it fails; a crash of its node or a failover works the same
// way), the next attempt of the occurrence finds the last checkpoint in
// Run.Checkpoint and resumes from there.
func ExampleCheckpoint() {
	dir, _ := os.MkdirTemp("", "sqlease-example-")
	defer os.RemoveAll(dir)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	store, err := sqlite.OpenStore(ctx, filepath.Join(dir, "jobs.db"), "sqlease")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.DB().Close()

	type progress struct{ Done int }
	done := make(chan struct{})
	handler := func(ctx context.Context, r sqlease.Run) error {
		var p progress
		if r.Checkpoint != nil {
			_ = json.Unmarshal(r.Checkpoint, &p)
		}
		fmt.Printf("attempt %d starts at item %d\n", r.Attempt, p.Done)
		for p.Done < 10 {
			if r.Attempt == 1 && p.Done == 6 {
				return errors.New("lost the connection to the provider")
			}
			p.Done++ // one item of work
			if err := scheduler.Checkpoint(ctx, p); err != nil {
				return err // no longer current: stop
			}
		}
		close(done)
		return nil
	}
	s, err := scheduler.New(scheduler.Config{Store: store, Holder: "worker-1", Handler: handler, PollInterval: 20 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, _, err := s.Create(ctx, sqlease.Job{Name: "import", Retry: sqlease.Retry{MaxAttempts: 3, Backoff: 10 * time.Millisecond}}); err != nil {
		fmt.Println(err)
		return
	}
	ran := make(chan struct{})
	go func() { defer close(ran); _ = s.Run(ctx) }()
	<-done
	stop() // Run finishes the run, then returns
	<-ran
	// Output:
	// attempt 1 starts at item 0
	// attempt 2 starts at item 6
}
