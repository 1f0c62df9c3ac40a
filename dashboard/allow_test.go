package dashboard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
)

// TestAllowShown: the job page of an overlap allow job says so, with its
// bound when it has one.
func TestAllowShown(t *testing.T) {
	s := newSite(t, "", "127.0.0.1:0")
	ctx := context.Background()
	for name, bound := range map[string]int{"bounded": 2, "free": 0} {
		if _, _, err := s.sched.Create(ctx, sqlease.Job{Name: name, Schedule: sqlease.Schedule{Every: time.Hour, Overlap: sqlease.OverlapAllow, MaxConcurrent: bound}}); err != nil {
			t.Fatal(err)
		}
	}
	for page, want := range map[string]string{
		"/ui/jobs/bounded": `id="overlap">allow, at most 2 at once<`,
		"/ui/jobs/free":    `id="overlap">allow: occurrences run at once, without a bound<`,
	} {
		if _, body, _ := s.get(page); !strings.Contains(body, want) {
			i := strings.Index(body, `id="overlap"`)
			t.Errorf("%s lacks %q: %.200s", page, want, body[max(i, 0):])
		}
	}
}
