package cli

import (
	"errors"
	"testing"

	"github.com/sqlease/sqlease/httpapi"
)

// Several runs of one name may be here at once (overlap "allow"): each is
// found by its own secret only, under its own name only, and releasing one
// leaves the other.
func TestRunSecretsSeveralOfOneName(t *testing.T) {
	var s runSecrets[int]
	a, releaseA := s.issue("job", 1)
	b, releaseB := s.issue("job", 2)
	defer releaseB()
	if a == b {
		t.Fatal("two runs got the same secret")
	}
	for _, tc := range []struct {
		name, secret string
		want         int
	}{{"job", a, 1}, {"job", b, 2}} {
		if got, err := s.find(tc.name, tc.secret); err != nil || got != tc.want {
			t.Errorf("find(%s, secret of run %d) = %d, %v", tc.name, tc.want, got, err)
		}
	}
	for _, tc := range []struct{ name, secret string }{{"other", a}, {"job", "wrong"}, {"job", ""}, {"", a}} {
		if _, err := s.find(tc.name, tc.secret); !errors.Is(err, httpapi.ErrUnauthorized) {
			t.Errorf("find(%q, %q): %v, want ErrUnauthorized", tc.name, tc.secret, err)
		}
	}
	releaseA()
	if _, err := s.find("job", a); !errors.Is(err, httpapi.ErrUnauthorized) {
		t.Errorf("a released run's secret: %v", err)
	}
	if got, err := s.find("job", b); err != nil || got != 2 {
		t.Errorf("the other run after one was released: %d, %v", got, err)
	}
}
