package scheduler

import "time"

// SetLoseClaimAnswer makes every claim-mode claim under a worker lease for
// which lose returns true report a lost connection after it committed, as
// a claim whose answer the database's ending of the session cut off; the
// returned func undoes it.
func SetLoseClaimAnswer(lose func(claimed int) bool) (undo func()) {
	testLoseClaimAnswer = lose
	return func() { testLoseClaimAnswer = nil }
}

// SetScheduleReadDelay makes every refresh and reload read of a leader's
// dispatch loop wait d first; the returned func undoes it.
func SetScheduleReadDelay(d time.Duration) (undo func()) {
	testScheduleReadDelay.Store(int64(d))
	return func() { testScheduleReadDelay.Store(0) }
}

// SetScheduleAnswerDelay makes the answer of every load of a leader's
// window (a term's first included) arrive d after the database read its
// clock; the returned func undoes it.
func SetScheduleAnswerDelay(d time.Duration) (undo func()) {
	testScheduleAnswerDelay.Store(int64(d))
	return func() { testScheduleAnswerDelay.Store(0) }
}

// SetClaimAhead makes leaders started after it claim ahead by d instead
// of claimAhead; the returned func undoes it.
func SetClaimAhead(d time.Duration) (undo func()) {
	testClaimAhead.Store(int64(d))
	return func() { testClaimAhead.Store(0) }
}

// BeatGroups returns how many claims' first heartbeats s has pending.
func BeatGroups(s *Scheduler) int {
	s.beats.mu.Lock()
	defer s.beats.mu.Unlock()
	return len(s.beats.m)
}
