package sqlease

import "time"

// Observer receives the elector's events, e.g. to export metrics. Calls are
// made synchronously from the elector's goroutines and must not block.
// Embed NopObserver to implement only some methods.
type Observer interface {
	// AcquireAttempted is called after every acquire attempt.
	AcquireAttempted(name string, took time.Duration, acquired bool, err error)
	// Renewed is called after every renew attempt.
	Renewed(name string, took time.Duration, err error)
	// LeadershipChanged is called when this instance starts (leading=true)
	// or stops leading.
	LeadershipChanged(name string, leading bool, epoch int64)
	// Blocked is called when the acting gate refuses a caller.
	Blocked(name string)
}

// NopObserver implements Observer and ignores every event.
type NopObserver struct{}

func (NopObserver) AcquireAttempted(string, time.Duration, bool, error) {}
func (NopObserver) Renewed(string, time.Duration, error)                {}
func (NopObserver) LeadershipChanged(string, bool, int64)               {}
func (NopObserver) Blocked(string)                                      {}
