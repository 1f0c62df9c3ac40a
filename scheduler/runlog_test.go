package scheduler

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/sqlease/sqlease/sqlstore"
)

func TestRunLogAttrs(t *testing.T) {
	var buf bytes.Buffer
	s := &Scheduler{log: slog.New(slog.NewJSONHandler(&buf, nil))}
	c := sqlstore.Claimed{Lock: sqlstore.Lock{JobID: 7, Holder: "h1", Epoch: 3}}
	c.ID, c.Name = 7, "nightly"
	l := s.runLogger(&c)
	l.Warn("run_start_failed", slog.String("error", "boom"))
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	l.start(at, 2, 9)
	l.Info("run_finished", slog.String("outcome", "succeeded"))

	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("got %d records, want 2:\n%s", len(lines), buf.String())
	}
	var before, after map[string]any
	if err := json.Unmarshal(lines[0], &before); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(lines[1], &after); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"job": "nightly", "job_id": 7.0, "holder_id": "h1", "lock_epoch": 3.0}
	for k, v := range want {
		if before[k] != v || after[k] != v {
			t.Errorf("%s: before start %v, after %v, want %v", k, before[k], after[k], v)
		}
	}
	if _, ok := before["scheduled_for"]; ok || before["error"] != "boom" || before["level"] != "WARN" {
		t.Errorf("record before start = %v", before)
	}
	if after["scheduled_for"] != at.Format(time.RFC3339) || after["attempt"] != 2.0 || after["epoch"] != 9.0 || after["outcome"] != "succeeded" {
		t.Errorf("record after start = %v", after)
	}
}

// A disabled level costs no allocation: the point of runLog.
func TestRunLogDisabledAllocatesNothing(t *testing.T) {
	s := &Scheduler{log: slog.New(slog.NewJSONHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	l := s.runLogger(&sqlstore.Claimed{})
	at := time.Now()
	if n := testing.AllocsPerRun(100, func() {
		l.start(at, 1, 1)
		l.Info("run_started")
		l.Info("run_finished", slog.String("outcome", "succeeded"), slog.Duration("took", time.Millisecond))
	}); n != 0 {
		t.Errorf("%v allocations per disabled run log, want 0", n)
	}
}
