package faults

import (
	"encoding/json"
	"fmt"
	neturl "net/url"
	"slices"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/internal/ledger"
)

// The fleet of every trial also runs an overlap "allow" job: a 500 ms
// answer every 300 ms, run_all, at most allowBound at once across the
// fleet — so that two occurrences are usually in flight when the fault
// hits, one of them perhaps on the victim.
const (
	allowJob   = "par"
	allowEvery = 300 * time.Millisecond
	allowBound = 2
	// allowLock is the job's lock_timeout. An occurrence whose claim (or
	// spawn) committed but whose answer was lost — a fault that ends the
	// sessions — stays locked to its worker, which does not know it holds
	// it, until its lock times out; then a worker's scan for occurrences
	// that need an owner (every 10 polls of 1 s) takes it (docs/jobs.md).
	// Job rows have a faster recovery (the worker gives back what no run
	// of its own holds); occurrence rows do not yet.
	allowLock = 3 * time.Second
	// allowStall bounds how long occurrences after the fault may wait for
	// the slots such occurrences hold.
	allowStall = allowLock + 10*time.Second
)

// createAllowJob creates the allow job through n.
func createAllowJob(t *testing.T, n *fleettest.Node, rc *fleettest.Receiver, retry map[string]any) {
	t.Helper()
	createJob(t, n, map[string]any{"name": allowJob, "schedule": map[string]any{"every": allowEvery.String()}, "missed_runs": "run_all",
		"overlap": "allow", "max_concurrent": allowBound, "retry": retry, "lock_timeout": allowLock.String(),
		"action": map[string]any{"http": map[string]any{"url": rc.URL + "/" + allowJob + "/delay/500ms", "timeout": "10s"}}})
}

// checkAllow checks the allow job once the trial's fleet has settled, with
// n a node still serving the API: every occurrence of it in the trial ran
// (consecutive, some after the fault began: checkRunAll), none succeeded
// twice in the runs ledger, and never more than allowBound of its
// deliveries overlapped at the receiver. (Two attempts of one occurrence
// overlapping while the first sender lived is the trial's OVERLAP check,
// over every job.)
func checkAllow(t *testing.T, rc *fleettest.Receiver, n *fleettest.Node, after time.Time) {
	t.Helper()
	// Occurrences after the fault may wait for the slots that the ones in
	// flight at the fault hold until they are retried — by a new leader
	// only once the earlier terms cannot act — so wait for one first.
	rc.WaitFor(dispatchBound+5*time.Second+allowStall, func(dl fleettest.Delivery) bool {
		sf, err := time.Parse(time.RFC3339Nano, dl.SF)
		return dl.Job == allowJob && err == nil && sf.After(after) && !dl.End.IsZero()
	})
	awaitNoGap(t, rc, allowJob, allowEvery, allowStall)
	checkRunAll(t, rc, allowJob, allowEvery, after)
	if peak, at := peakOverlap(rc.Deliveries(), allowJob); peak > allowBound {
		t.Errorf("MAX_CONCURRENT: %d deliveries of %s overlapped (max_concurrent %d): %v", peak, allowJob, allowBound, at)
	}
	runs := map[string][]sqlease.Run{} // by scheduled_for, as the runs API writes it
	runsOf := map[string][]string{}    // what the ledger says of each occurrence, for a failure's message
	succeeded := 0
	after_ := ""
	for page := 0; ; page++ {
		path := "/v1/jobs/" + allowJob + "/runs?limit=1000"
		if after_ != "" {
			path += "&after=" + neturl.QueryEscape(after_)
		}
		code, body, err := n.Do("GET", path, nil)
		if err != nil || code != 200 {
			t.Errorf("runs of %s through %s: %d %s %v", allowJob, n.Holder, code, body, err)
			return
		}
		var l httpapi.RunList
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatalf("runs of %s: %v", allowJob, err)
		}
		for _, r := range l.Runs {
			sf, err := time.Parse(time.RFC3339Nano, r.ScheduledFor)
			if err != nil {
				t.Errorf("run of %s: bad scheduled_for %q", allowJob, r.ScheduledFor)
			}
			if r.Outcome == string(sqlease.OutcomeSucceeded) {
				succeeded++
			}
			runs[r.ScheduledFor] = append(runs[r.ScheduledFor], sqlease.Run{Job: allowJob, ScheduledFor: sf, Attempt: r.Attempt,
				Holder: r.Holder, Epoch: r.Epoch, Outcome: sqlease.Outcome(r.Outcome), Error: r.Error})
			runsOf[r.ScheduledFor] = append(runsOf[r.ScheduledFor], fmt.Sprintf("attempt %d %s by %s@%d [%s – %s] %s", r.Attempt, r.Outcome, r.Holder, r.Epoch, r.StartedAt, deref(r.FinishedAt), r.Error))
		}
		if l.Next == "" || page > 100 {
			break
		}
		after_ = l.Next
	}
	if succeeded == 0 {
		t.Errorf("LOST OCCURRENCES: no occurrence of %s succeeded", allowJob)
	}
	for sf, rs := range runs {
		if err := ledger.OneSuccess(rs); err != nil {
			t.Errorf("TWICE: %v; the runs ledger: %q; deliveries: %v", err, runsOf[sf], deliveriesOf(rc, allowJob+"/"+sf))
		}
	}
}

// peakOverlap is the largest number of job's deliveries in progress at
// one instant (an open one until now), and those deliveries.
func peakOverlap(ds []fleettest.Delivery, job string) (int, []string) {
	type edge struct {
		at    time.Time
		delta int
		d     fleettest.Delivery
	}
	var edges []edge
	for _, d := range ds {
		if d.Job != job {
			continue
		}
		end := d.End
		if end.IsZero() {
			end = time.Now()
		}
		edges = append(edges, edge{d.Start, 1, d}, edge{end, -1, d})
	}
	// Ends before starts at the same instant: touching is not overlapping.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	peak, now := 0, 0
	open := map[int]fleettest.Delivery{}
	var at []string
	for _, e := range edges {
		now += e.delta
		if e.delta > 0 {
			open[e.d.Seq] = e.d
		} else {
			delete(open, e.d.Seq)
		}
		if now > peak {
			peak, at = now, nil
			for _, d := range open {
				at = append(at, fmt.Sprint(d))
			}
		}
	}
	return peak, at
}

func deref(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}
