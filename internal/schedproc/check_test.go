package schedproc

import (
	"testing"
	"time"

	"github.com/sqlease/sqlease"
)

// An occurrence on a whole second formats without a fraction ("…:09Z"),
// which sorts after "…:09.2Z" as a string: Of must order by time.
func TestOfOrdersByTime(t *testing.T) {
	base := time.Date(2026, 11, 22, 4, 46, 8, 800_000_000, time.UTC)
	var runs []sqlease.Run
	for i := range 3 {
		runs = append(runs, sqlease.Run{Job: "j", ScheduledFor: base.Add(time.Duration(i) * 200 * time.Millisecond), Attempt: 1})
	}
	a := Analyze(map[string]sqlease.Job{"j": {Name: "j"}}, runs, nil, nil)
	occs := a.Of("j")
	for i, o := range occs {
		if want := FormatSF(runs[i].ScheduledFor); o.Occ.SF != want {
			t.Fatalf("occurrence %d is %s, want %s", i, o.Occ.SF, want)
		}
	}
}
