package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
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

// TestCreateMany: a batch is validated as a whole (nothing written when one
// job is invalid), written all or nothing (a clash with other content rolls
// back the jobs before it), idempotent per job (a retried batch creates only
// what is missing), and larger than one statement's chunk.
func TestCreateMany(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		ctx := context.Background()
		s := newSched(t, scheduler.Config{Store: newStore(t), Holder: "w"})
		count := func() int {
			t.Helper()
			n, after := 0, ""
			for {
				page, err := s.Jobs(ctx, after, 1000)
				if err != nil {
					t.Fatal(err)
				}
				n += len(page)
				if len(page) < 1000 {
					return n
				}
				after = page[len(page)-1].Name
			}
		}
		batch := func(prefix string, n int) []sqlease.Job {
			jobs := make([]sqlease.Job, n)
			for i := range jobs {
				jobs[i] = sqlease.Job{Name: fmt.Sprintf("%s-%05d", prefix, i), Key: fmt.Sprintf("%s-key-%d", prefix, i),
					Schedule: sqlease.Schedule{Every: time.Duration(i+1) * time.Minute}}
			}
			return jobs
		}

		// Invalid: two bad jobs among good ones; both named, nothing written.
		jobs := batch("a", 10)
		jobs[3].Schedule = sqlease.Schedule{Cron: "61 * * * *"}
		jobs[7].Name = "Bad Name"
		_, err := s.CreateMany(ctx, jobs)
		if !errors.Is(err, sqlease.ErrInvalidConfig) && !errors.Is(err, sqlease.ErrInvalidName) {
			t.Fatalf("invalid batch: want ErrInvalidConfig, got %v", err)
		}
		if msg := fmt.Sprint(err); !strings.Contains(msg, "jobs[3]") || !strings.Contains(msg, "schedule.cron") || !strings.Contains(msg, "jobs[7]") {
			t.Errorf("invalid batch: the error should name jobs[3].schedule.cron and jobs[7]: %v", err)
		}
		if n := count(); n != 0 {
			t.Fatalf("an invalid batch wrote %d jobs", n)
		}

		// The same name twice with different content is invalid; the same
		// job twice counts once.
		jobs = batch("b", 3)
		dup := jobs[0]
		dup.Schedule.Every = time.Hour
		if _, err := s.CreateMany(ctx, append(jobs, dup)); !errors.Is(err, sqlease.ErrInvalidConfig) || !strings.Contains(err.Error(), "jobs[3]") {
			t.Fatalf("a name given twice with different content: want ErrInvalidConfig naming jobs[3], got %v", err)
		}
		res, err := s.CreateMany(ctx, append(jobs, jobs[1]))
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 4 || !res[1].Created || res[3].Created || res[3].Job.ID != res[1].Job.ID {
			t.Fatalf("a job given twice: want created once, got %+v", res)
		}
		for i, r := range res[:3] {
			if r.Job.Name != jobs[i].Name || r.Job.ID == 0 || r.Job.NextRunAt.IsZero() || r.Job.Retry.MaxAttempts != scheduler.DefaultMaxAttempts {
				t.Errorf("res[%d]: not the stored job with defaults: %+v", i, r.Job)
			}
		}

		// Larger than a chunk; then retried: nothing new, same rows.
		big := batch("c", sqlstore.InsertJobsChunk+123)
		res, err = s.CreateMany(ctx, big)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if !r.Created || r.Job.Name != big[i].Name {
				t.Fatalf("res[%d] = %+v, want %s created", i, r, big[i].Name)
			}
		}
		again, err := s.CreateMany(ctx, big)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range again {
			if r.Created || r.Job.ID != res[i].Job.ID {
				t.Fatalf("retry: again[%d] = created %v id %d, want the existing row %d", i, r.Created, r.Job.ID, res[i].Job.ID)
			}
		}
		if n := count(); n != 3+len(big) {
			t.Fatalf("%d jobs stored, want %d", n, 3+len(big))
		}

		// A clash with other content (the last job's key is taken) rolls
		// the whole batch back, and names the job.
		jobs = batch("d", 50)
		jobs[49].Key = big[0].Key
		if _, err := s.CreateMany(ctx, jobs); !errors.Is(err, sqlease.ErrConflict) || !strings.Contains(err.Error(), jobs[49].Name) {
			t.Fatalf("clash: want ErrConflict naming %s, got %v", jobs[49].Name, err)
		}
		if n := count(); n != 3+len(big) {
			t.Fatalf("a batch that clashed wrote %d jobs", n-3-len(big))
		}
		if _, err := s.Job(ctx, jobs[0].Name); !errors.Is(err, sqlease.ErrNoJob) {
			t.Fatalf("the first job of a rolled-back batch exists: %v", err)
		}
	})
}
