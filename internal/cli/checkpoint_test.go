package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
)

// TestPrintRunsCheckpoint: jobs runs --text shows a run's checkpoint on a
// line of its own, none for a run without.
func TestPrintRunsCheckpoint(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	printRuns(&b, []sqlease.Run{
		{ScheduledFor: at, Attempt: 2, Outcome: sqlease.OutcomeRunning, Holder: "b", Epoch: 2},
		{ScheduledFor: at, Attempt: 1, Outcome: sqlease.OutcomeAbandoned, Holder: "a", Epoch: 1, Checkpoint: json.RawMessage(`{"n":3}`)},
	}, "")
	want := "2026-01-01T00:00:00Z attempt 2 running epoch 2 holder b\n" +
		"2026-01-01T00:00:00Z attempt 1 abandoned epoch 1 holder a\n    checkpoint: {\"n\":3}\n"
	if got := b.String(); got != want {
		t.Errorf("printRuns:\n%s\nwant:\n%s", got, want)
	}
	if strings.Count(b.String(), "checkpoint") != 1 {
		t.Error("a run without checkpoint shows one")
	}
}
