package sqlease

import "time"

// Clock is the local clock. It decides only when to stop trusting a lease;
// expiry is always decided by the database clock. Times it returns must carry
// a monotonic reading (time.Now does), so never call .UTC() on them.
type Clock interface {
	Now() time.Time
}

// SystemClock is the Clock backed by time.Now.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }
