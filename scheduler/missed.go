package scheduler

import (
	"fmt"
	"math"
	"time"

	"github.com/sqlease/sqlease"
)

// DefaultSkipTolerance is how late an occurrence may start and still count as
// on time under the skip policy when the job sets no skip_if_older_than. It
// absorbs ordinary dispatch latency — polling, a refresh, a failover well
// inside the default 10 s — so that skip drops only what an outage made
// late, not what a busy scheduler picked up a second after its time.
//
// It is deliberately not "one interval" for every-jobs: the latest occurrence
// of an interval schedule is always less than one interval old, so skip would
// then never skip anything and would behave exactly like run_once.
const DefaultSkipTolerance = time.Minute

// maxCronSteps bounds the occurrences Plan walks through for a cron schedule.
const maxCronSteps = 100_000

// ValidateMissedRuns checks a job's missed-runs policy. It returns an error
// wrapping sqlease.ErrInvalidConfig that names missed_runs when policy is not
// "" (run_once), run_once, run_all or skip, and skip_if_older_than when
// skipIfOlderThan is negative. With skip, skipIfOlderThan replaces
// DefaultSkipTolerance.
func ValidateMissedRuns(policy sqlease.MissedRuns, skipIfOlderThan time.Duration) error {
	switch policy {
	case "", sqlease.RunOnce, sqlease.RunAll, sqlease.Skip:
	default:
		return fmt.Errorf("%w: missed_runs must be %s, %s or %s, got %q", sqlease.ErrInvalidConfig, sqlease.RunOnce, sqlease.RunAll, sqlease.Skip, policy)
	}
	if skipIfOlderThan < 0 {
		return fmt.Errorf("%w: skip_if_older_than must not be negative, got %s", sqlease.ErrInvalidConfig, skipIfOlderThan)
	}
	return nil
}

// Plan applies a job's missed-runs policy. due is the job's next_run_at and
// now the database's now. It returns the occurrence to run now (run, ok) and
// the occurrence after it (next, hasNext): when ok, next is what next_run_at
// becomes once run completes; when !ok, next is what next_run_at must become
// now, without running anything. When ok and run is later than due, the
// occurrences before run are dropped: the caller moves next_run_at to run
// before starting it, so that its attempts and idempotency key are run's.
//
// An occurrence is missed when a later occurrence of the same job is also
// already due (≤ now); the latest occurrence ≤ now is never missed. With
// skipIfOlderThan > 0, an occurrence older than now-skipIfOlderThan is too
// old (exactly now-skipIfOlderThan is not). For a recurring job:
//   - run_once (also ""): run the latest occurrence ≤ now — the missed ones
//     collapse into it — unless it is too old; then run nothing and next is
//     the first occurrence after now.
//   - run_all: run due itself, so that missed occurrences run one by one,
//     oldest first; too-old ones are dropped and the oldest that is not too
//     old runs instead; if all due ones are too old, run nothing and next is
//     the first occurrence after now.
//   - skip: never run a missed occurrence; run the latest occurrence ≤ now
//     only if it is at most the tolerance old (skipIfOlderThan if set, else
//     DefaultSkipTolerance), else run nothing and next is the first
//     occurrence after now.
//
// A one-off job (at or once) has a single occurrence, due, which is never
// missed: it runs under every policy unless skipIfOlderThan says it is too
// old, in which case nothing runs and hasNext is false.
//
// If due is after now nothing is due: ok is false and next is due. If due is
// zero the job has no occurrence left: ok and hasNext are false.
//
// Plan is cheap for any gap: for every it computes the latest occurrence
// arithmetically; for cron it searches back from now in doubling windows and
// walks at most 100,000 occurrences.
func Plan(s sqlease.Schedule, policy sqlease.MissedRuns, skipIfOlderThan time.Duration, due time.Time, now time.Time) (run time.Time, ok bool, next time.Time, hasNext bool) {
	if due.IsZero() {
		return time.Time{}, false, time.Time{}, false
	}
	if due.After(now) {
		return time.Time{}, false, due, true
	}
	seq, recurring := newOccurrences(s)
	var cutoff time.Time
	if skipIfOlderThan > 0 {
		cutoff = now.Add(-skipIfOlderThan)
	}
	tooOld := func(t time.Time) bool { return skipIfOlderThan > 0 && t.Before(cutoff) }

	if !recurring {
		if tooOld(due) {
			return time.Time{}, false, time.Time{}, false
		}
		return due, true, time.Time{}, false
	}

	latest := seq.latestAtOrBefore(due, now)
	after, hasAfter := seq.next(latest) // the first occurrence after now
	switch policy {
	case sqlease.RunAll:
		r := due
		if tooOld(r) {
			r = seq.firstAtOrAfter(due, cutoff)
			if r.IsZero() || r.After(now) {
				return time.Time{}, false, after, hasAfter
			}
		}
		n, hasN := seq.next(r)
		return r, true, n, hasN
	case sqlease.Skip:
		tolerance := skipIfOlderThan
		if tolerance <= 0 {
			tolerance = DefaultSkipTolerance
		}
		if now.Sub(latest) > tolerance {
			return time.Time{}, false, after, hasAfter
		}
		return latest, true, after, hasAfter
	default: // run_once
		if tooOld(latest) {
			return time.Time{}, false, after, hasAfter
		}
		return latest, true, after, hasAfter
	}
}

// occurrences is the sequence of a recurring schedule: every > 0 or a valid
// cron expression.
type occurrences struct {
	every time.Duration
	cron  cronSchedule
}

func newOccurrences(s sqlease.Schedule) (occurrences, bool) {
	switch {
	case s.Every > 0:
		return occurrences{every: s.Every}, true
	case s.Every == 0 && s.Cron != "":
		c, err := compileCron(s.Cron, s.Timezone)
		if err != nil {
			return occurrences{}, false
		}
		return occurrences{cron: c}, true
	default:
		return occurrences{}, false
	}
}

func (o occurrences) next(t time.Time) (time.Time, bool) {
	if o.every > 0 {
		return t.Add(o.every), true
	}
	return o.cron.next(t)
}

// latestAtOrBefore returns the latest occurrence ≤ now of the sequence that
// starts at due (due ≤ now).
func (o occurrences) latestAtOrBefore(due, now time.Time) time.Time {
	if o.every > 0 {
		return latestEvery(due, now, o.every)
	}
	return o.cron.latestAtOrBefore(due, now)
}

// firstAtOrAfter returns the first occurrence ≥ cutoff of the sequence that
// starts at due (due < cutoff), or zero if there is none.
func (o occurrences) firstAtOrAfter(due, cutoff time.Time) time.Time {
	if o.every > 0 {
		t := latestEvery(due, cutoff, o.every)
		if t.Before(cutoff) {
			t = t.Add(o.every)
		}
		return t
	}
	t, ok := o.cron.next(cutoff.Add(-time.Nanosecond))
	if !ok {
		return time.Time{}
	}
	return t
}

// latestEvery returns due + k×every for the largest k with the result ≤ now
// (due ≤ now). Gaps longer than a time.Duration (292 years) are crossed in
// whole-interval jumps.
func latestEvery(due, now time.Time, every time.Duration) time.Time {
	for range 1 << 16 {
		d := now.Sub(due)
		if d < math.MaxInt64 {
			return due.Add(d / every * every)
		}
		due = due.Add(math.MaxInt64 / every * every)
	}
	return due
}

// latestAtOrBefore returns the latest occurrence ≤ now of the sequence that
// starts at due (due ≤ now): due itself, or the latest match in (due, now].
// It looks back from now over windows of 1 minute, 2, 4, … until one holds a
// match, so the cost grows with the log of the gap, not the gap.
func (c cronSchedule) latestAtOrBefore(due, now time.Time) time.Time {
	const maxWindow = 100 * 365 * 24 * time.Hour
	for w := time.Minute; ; w *= 2 {
		from, floor := now.Add(-w), false
		if w > maxWindow || !from.After(due) {
			from, floor = due, true
		}
		m, ok := c.next(from)
		if ok && !m.After(now) {
			for range maxCronSteps {
				n, ok := c.next(m)
				if !ok || n.After(now) {
					break
				}
				m = n
			}
			return m
		}
		if floor {
			return due
		}
	}
}
