package ledger

import (
	"slices"
	"time"
)

// Unran is the check that nothing accepted is lost: it waits up to timeout
// for every job in accepted (a job's name and when it was accepted) to have
// run, as ran reports the jobs that ran so far (called again every 20 ms),
// and returns, sorted, the jobs that had not by then.
func Unran(accepted map[string]time.Time, timeout time.Duration, ran func() map[string]bool) []string {
	var lost []string
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		done := ran()
		lost = lost[:0]
		for name := range accepted {
			if !done[name] {
				lost = append(lost, name)
			}
		}
		if len(lost) == 0 || time.Now().After(deadline) {
			slices.Sort(lost)
			return lost
		}
	}
}
