package scheduler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// maxFinishGroup bounds the runs one finish statement writes.
const maxFinishGroup = 512

// finisher writes the outcomes of claim-mode runs in groups (group commit):
// whatever finished while the previous statement was in flight goes into
// the next one, so a busy worker pays one statement for many runs while a
// lone run still writes at once. Each run's write stays conditional on its
// own lock (Store.FinishRuns).
type finisher struct {
	store   *sqlstore.Store
	items   chan finishItem
	pending chan struct{} // bounds the runs waiting for their finish write
	wg      sync.WaitGroup
}

type finishItem struct {
	req  sqlstore.FinishReq
	done chan error
}

// startFinisher starts writers goroutines, so that at most that many
// statements are in flight, for at most maxPending runs waiting to be
// written.
func startFinisher(store *sqlstore.Store, writers, maxPending int) *finisher {
	f := &finisher{store: store, items: make(chan finishItem), pending: make(chan struct{}, maxPending)}
	for range writers {
		f.wg.Add(1)
		go f.loop()
	}
	return f
}

// stop ends the writers; every finish must have returned.
func (f *finisher) stop() {
	close(f.items)
	f.wg.Wait()
}

// finish writes one run's outcome and waits for it. It returns an error
// wrapping sqlease.ErrLeaseLost when the lock was lost (nothing written).
// Once the run has a place among the pending writes, handOff is called: the
// run gives its execution slot to the next claim while its outcome waits
// for the next group, so that the database round trips of finishing do not
// hold back execution (the job stays locked until the write).
func (f *finisher) finish(req sqlstore.FinishReq, handOff func()) error {
	f.pending <- struct{}{}
	defer func() { <-f.pending }()
	if handOff != nil {
		handOff()
	}
	done := make(chan error, 1)
	f.items <- finishItem{req: req, done: done}
	return <-done
}

func (f *finisher) loop() {
	defer f.wg.Done()
	for it := range f.items {
		group := []finishItem{it}
	more:
		for len(group) < maxFinishGroup {
			select {
			case it, ok := <-f.items:
				if !ok {
					break more
				}
				group = append(group, it)
			default:
				break more
			}
		}
		f.write(group)
	}
}

func (f *finisher) write(group []finishItem) {
	reqs := make([]sqlstore.FinishReq, len(group))
	for i, it := range group {
		reqs[i] = it.req
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var done []bool
	err := retryTransient(ctx, func() (err error) {
		done, err = f.store.FinishRuns(ctx, reqs)
		return err
	})
	for i, it := range group {
		r := it.req
		switch {
		case err != nil:
			it.done <- err
		case !done[i]:
			it.done <- fmt.Errorf("finish run %s attempt %d as %s: job lock %d/%s@%d: %w", r.Run.IdempotencyKey(), r.Run.Attempt,
				r.Finish.Outcome, r.Lock.JobID, r.Lock.Holder, r.Lock.Epoch, sqlease.ErrLeaseLost)
		default:
			it.done <- nil
		}
	}
}
