package cli

import (
	"testing"

	"github.com/sqlease/sqlease/httpapi"
)

// TestOverlapText: jobs get --text says allow's bound.
func TestOverlapText(t *testing.T) {
	for _, tc := range []struct {
		j    httpapi.Job
		want string
	}{
		{httpapi.Job{Overlap: "allow", MaxConcurrent: 2}, "allow, at most 2 at once"},
		{httpapi.Job{Overlap: "allow"}, "allow"},
		{httpapi.Job{Overlap: "wait"}, "wait"},
	} {
		if got := overlapText(tc.j); got != tc.want {
			t.Errorf("overlapText(%s, %d) = %q, want %q", tc.j.Overlap, tc.j.MaxConcurrent, got, tc.want)
		}
	}
}
