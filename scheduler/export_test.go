package scheduler

// SetLoseClaimAnswer makes every claim-mode claim under a worker lease for
// which lose returns true report a lost connection after it committed, as
// a claim whose answer the database's ending of the session cut off; the
// returned func undoes it.
func SetLoseClaimAnswer(lose func(claimed int) bool) (undo func()) {
	testLoseClaimAnswer = lose
	return func() { testLoseClaimAnswer = nil }
}
