package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/scheduler"
)

// TestTriggerKeepsEveryPhase: a trigger runs an every job now, once, and
// its regular occurrences keep their schedule: the one after the
// triggered run is the one the trigger moved aside, not the trigger's time
// plus the interval.
func TestTriggerKeepsEveryPhase(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		rec := &recorder{}
		s := newSched(t, scheduler.Config{Store: newStore(t), Holder: "w", Handler: rec.handle})
		const every = 2 * time.Second
		if _, _, err := s.Create(ctx, sqlease.Job{Name: "tick", Schedule: sqlease.Schedule{Every: every}}); err != nil {
			t.Fatal(err)
		}
		runClaim(t, s)
		first, _ := rec.first(t, "tick")
		dbtest.WaitFor(t, 10*time.Second, "the first run to finish", func() bool {
			j, _ := s.Job(ctx, "tick")
			return j.LockedBy == "" && j.NextRunAt.After(first.ScheduledFor)
		})
		time.Sleep(300 * time.Millisecond)
		j, err := s.Trigger(ctx, "tick")
		if err != nil {
			t.Fatal(err)
		}
		regular := first.ScheduledFor.Add(every)
		if !j.RegularNextAt.Equal(regular) {
			t.Fatalf("regular occurrence kept = %v, want %v", j.RegularNextAt, regular)
		}
		dbtest.WaitFor(t, 10*time.Second, "three runs", func() bool { return rec.count() >= 3 })
		runs := rec.snapshot()
		if trig := runs[1].ScheduledFor; !trig.After(first.ScheduledFor) || !trig.Before(regular) {
			t.Fatalf("triggered run scheduled for %v, want between %v and %v", trig, first.ScheduledFor, regular)
		}
		if !runs[2].ScheduledFor.Equal(regular) {
			t.Fatalf("run after the triggered one scheduled for %v, want the regular %v (phase kept), not %v",
				runs[2].ScheduledFor, regular, runs[1].ScheduledFor.Add(every))
		}
	})
}

// TestPausedJobRefusesTrigger: a trigger of a paused job would move its
// next run and run nothing until a resume: it is refused with ErrConflict
// naming the state and the pause's reason, and changes nothing.
func TestPausedJobRefusesTrigger(t *testing.T) {
	ctx := context.Background()
	s := newSched(t, scheduler.Config{Store: dbtest.SQLite(t), Holder: "w"})
	if _, _, err := s.Create(ctx, sqlease.Job{Name: "nightly", Schedule: sqlease.Schedule{Cron: "0 3 * * *"}}); err != nil {
		t.Fatal(err)
	}
	before, err := s.PauseWithReason(ctx, "nightly", "waiting for the vendor fix")
	if err != nil || !before.Paused || before.PauseReason != "waiting for the vendor fix" {
		t.Fatalf("pause: %+v, %v", before, err)
	}
	_, err = s.Trigger(ctx, "nightly")
	if !errors.Is(err, sqlease.ErrConflict) || !strings.Contains(err.Error(), "paused") || !strings.Contains(err.Error(), "vendor fix") {
		t.Fatalf("trigger of a paused job: %v, want ErrConflict naming the state", err)
	}
	if after, _ := s.Job(ctx, "nightly"); !after.NextRunAt.Equal(before.NextRunAt) || !after.LastModifiedAt.Equal(before.LastModifiedAt) {
		t.Fatalf("a refused trigger changed the job: %+v -> %+v", before, after)
	}
	if j, err := s.Resume(ctx, "nightly"); err != nil || j.PauseReason != "" {
		t.Fatalf("resume: reason %q, %v", j.PauseReason, err)
	}
	if _, err := s.Trigger(ctx, "nightly"); err != nil {
		t.Fatalf("trigger after resume: %v", err)
	}
}

// TestPausePrefix: PausePrefix and ResumePrefix act on the jobs whose
// names start with the prefix ("" is explicit: every job) and count them;
// an invalid prefix or an overlong reason is refused and writes nothing.
func TestPausePrefix(t *testing.T) {
	ctx := context.Background()
	s := newSched(t, scheduler.Config{Store: dbtest.SQLite(t), Holder: "w"})
	for _, n := range []string{"etl.load", "etl.clean", "report"} {
		if _, _, err := s.Create(ctx, sqlease.Job{Name: n, Schedule: sqlease.Schedule{Every: time.Hour}}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.PausePrefix(ctx, "etl.", "warehouse migration"); err != nil || n != 2 {
		t.Fatalf("PausePrefix(etl.) = %d, %v", n, err)
	}
	if j, _ := s.Job(ctx, "etl.load"); !j.Paused || j.PauseReason != "warehouse migration" {
		t.Fatalf("etl.load: %+v", j)
	}
	if j, _ := s.Job(ctx, "report"); j.Paused {
		t.Fatal("report paused by the prefix etl.")
	}
	for _, bad := range []struct{ prefix, reason string }{{"ETL", ""}, {"etl%", ""}, {"etl", strings.Repeat("r", scheduler.MaxPauseReasonBytes+1)}} {
		if _, err := s.PausePrefix(ctx, bad.prefix, bad.reason); !errors.Is(err, sqlease.ErrInvalidConfig) {
			t.Errorf("PausePrefix(%q, %d bytes): %v, want ErrInvalidConfig", bad.prefix, len(bad.reason), err)
		}
	}
	if _, err := s.PauseWithReason(ctx, "report", strings.Repeat("r", scheduler.MaxPauseReasonBytes+1)); !errors.Is(err, sqlease.ErrInvalidConfig) {
		t.Errorf("overlong reason: %v", err)
	}
	if j, _ := s.Job(ctx, "report"); j.Paused {
		t.Fatal("an invalid pause wrote")
	}
	if n, err := s.ResumePrefix(ctx, ""); err != nil || n != 3 {
		t.Fatalf("ResumePrefix(\"\") = %d, %v", n, err)
	}
}
