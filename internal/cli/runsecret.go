package cli

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"sync"

	"github.com/sqlease/sqlease/httpapi"
)

// runSecrets is the one way this node hands a run on it — a job action's
// attempt, a singleton's process — a secret of its own for its calls back
// to the node's API, and checks such a call. The secret is 24 random bytes
// in hex; only its SHA-256 is kept, compared in constant time whether or
// not a run of that name is here (a missing run is compared with a secret
// nobody holds), so that every caller without the run's secret gets one
// answer, httpapi.ErrUnauthorized, and learns nothing of what runs here
// (issue 30, item 17). The zero value is ready to use.
type runSecrets[R any] struct {
	mu   sync.Mutex
	runs map[string]*secretRun[R] // by name: one run of a name at a time
}

type secretRun[R any] struct {
	secret [32]byte // sha256 of the token
	run    R
}

// issue makes run the run of name here, with a new secret, and returns the
// token to hand it; release forgets it (not a later run of the same name).
func (s *runSecrets[R]) issue(name string, run R) (token string, release func()) {
	var raw [24]byte
	_, _ = rand.Read(raw[:])
	token = hex.EncodeToString(raw[:])
	r := &secretRun[R]{secret: sha256.Sum256([]byte(token)), run: run}
	s.mu.Lock()
	if s.runs == nil {
		s.runs = map[string]*secretRun[R]{}
	}
	s.runs[name] = r
	s.mu.Unlock()
	return token, func() {
		s.mu.Lock()
		if s.runs[name] == r {
			delete(s.runs, name)
		}
		s.mu.Unlock()
	}
}

// find returns the run of name here whose secret this is, or
// httpapi.ErrUnauthorized.
func (s *runSecrets[R]) find(name, secret string) (R, error) {
	got := sha256.Sum256([]byte(secret))
	s.mu.Lock()
	r := s.runs[name]
	s.mu.Unlock()
	want := noSecret
	if r != nil {
		want = r.secret
	}
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 || r == nil {
		var none R
		return none, httpapi.ErrUnauthorized
	}
	return r.run, nil
}

// noSecret stands for the secret of a run that is not here.
var noSecret = func() (s [32]byte) {
	_, _ = rand.Read(s[:])
	return s
}()
