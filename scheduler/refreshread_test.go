package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/scheduler"
)

// The leader's refresh reads beside its dispatch, not in its way: with
// every refresh read taking 500 ms (refreshes every 50 ms, so a read is
// almost always in flight), jobs loaded at the term's start still start at
// their time. A loop that read itself would stand still nine tenths of the
// time, and a start falling due then would wait up to 500 ms: each of the
// 20 starts below would then be within 250 ms with a chance of about one
// half.
func TestSlowRefreshDoesNotHoldDispatch(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		now, err := st.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		const jobs = 20
		first := now.Add(2 * time.Second)
		admin := newSched(t, scheduler.Config{Store: st})
		for i := range jobs {
			at := first.Add(time.Duration(i) * 100 * time.Millisecond)
			if _, _, err := admin.Create(ctx, sqlease.Job{Name: fmt.Sprintf("at-%d", i), Schedule: sqlease.Schedule{At: at}}); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(scheduler.SetScheduleReadDelay(500 * time.Millisecond)) // after the leader stops
		rec := &recorder{}
		s := newSched(t, scheduler.Config{Store: st, Handler: rec.handle, RefreshInterval: 50 * time.Millisecond})
		e := lead(t, st, &s, "leader")
		dbtest.WaitFor(t, 10*time.Second, "leadership", e.IsLeader)
		dbtest.WaitFor(t, 15*time.Second, "the 20 runs", func() bool { return rec.count() >= jobs })
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for i, r := range rec.runs {
			if late := rec.at[i].Sub(r.ScheduledFor); late > 250*time.Millisecond {
				t.Errorf("%s started %s late (every refresh read takes 500 ms)", r.Job, late.Round(time.Millisecond))
			}
		}
	})
}

// A run that ends while a refresh or reload reads hands its job's next
// occurrence to the loop, which schedules it at once (the read, which may
// predate the finish, then leaves the job out; a reload keeps the entry):
// with a horizon of 1 s the leader reloads about twice a second, every
// read taking 300 ms, so a read is almost always in flight, and a job due
// every 100 ms still starts at each occurrence, give or take one a loaded
// machine starts too late (the missed-runs policy skips it). Dropping the
// finish's entry left the job to the next refresh, 350 ms or more later.
func TestReloadKeepsFinishesMadeWhileItRead(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		st := newStore(t)
		admin := newSched(t, scheduler.Config{Store: st})
		if _, _, err := admin.Create(ctx, sqlease.Job{Name: "tick", Schedule: sqlease.Schedule{Every: 100 * time.Millisecond}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(scheduler.SetScheduleReadDelay(300 * time.Millisecond)) // after the leader stops
		rec := &recorder{}
		s := newSched(t, scheduler.Config{Store: st, Handler: rec.handle, RefreshInterval: 50 * time.Millisecond, ScheduleHorizon: time.Second})
		e := lead(t, st, &s, "leader")
		dbtest.WaitFor(t, 10*time.Second, "leadership", e.IsLeader)
		dbtest.WaitFor(t, 20*time.Second, "30 runs", func() bool { return rec.count() >= 30 })
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for i := 1; i < len(rec.runs); i++ {
			if gap := rec.runs[i].ScheduledFor.Sub(rec.runs[i-1].ScheduledFor); gap >= 400*time.Millisecond {
				t.Errorf("occurrence %s followed %s: the occurrences between were skipped", rec.runs[i].ScheduledFor.Format("15:04:05.000"), rec.runs[i-1].ScheduledFor.Format("15:04:05.000"))
			}
			if late := rec.at[i].Sub(rec.runs[i].ScheduledFor); late >= 400*time.Millisecond {
				t.Errorf("occurrence %s started %s late", rec.runs[i].ScheduledFor.Format("15:04:05.000"), late.Round(time.Millisecond))
			}
		}
	})
}
