package scheduler

import "time"

// SetWorkerClaimAhead makes claim-mode workers claim ahead by d instead of
// workerClaimAhead (where the store can); the returned func undoes it.
func SetWorkerClaimAhead(d time.Duration) (undo func()) {
	testWorkerClaimAhead.Store(int64(d))
	return func() { testWorkerClaimAhead.Store(0) }
}
