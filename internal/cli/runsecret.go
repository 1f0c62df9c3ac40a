package cli

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"sync"

	"github.com/sqlease/sqlease/httpapi"
)

// runSecrets is the one way this node hands a run on it — a job action's
// attempt, a singleton's process — a secret of its own for its calls back
// to the node's API, and checks such a call. The secret is 24 random bytes
// in hex; only its SHA-256 is kept, and a run is found by it: several runs
// of one name may be here at once (the occurrences of a job whose overlap
// policy is "allow"), each with its own secret. Every caller without a
// run's secret gets one answer, httpapi.ErrUnauthorized, and learns nothing
// of what runs here (issue 30, item 17): the lookup is by the digest of a
// random secret, whose timing tells nothing of the secret itself. The zero
// value is ready to use.
type runSecrets[R any] struct {
	mu   sync.Mutex
	runs map[[32]byte]*secretRun[R] // by the SHA-256 of their token
}

type secretRun[R any] struct {
	name string
	run  R
}

// issue makes run a run of name here, with a new secret, and returns the
// token to hand it; release forgets it (and no other run).
func (s *runSecrets[R]) issue(name string, run R) (token string, release func()) {
	var raw [24]byte
	_, _ = rand.Read(raw[:])
	token = hex.EncodeToString(raw[:])
	key := sha256.Sum256([]byte(token))
	s.mu.Lock()
	if s.runs == nil {
		s.runs = map[[32]byte]*secretRun[R]{}
	}
	s.runs[key] = &secretRun[R]{name: name, run: run}
	s.mu.Unlock()
	return token, func() {
		s.mu.Lock()
		delete(s.runs, key)
		s.mu.Unlock()
	}
}

// find returns the run of name here whose secret this is, or
// httpapi.ErrUnauthorized.
func (s *runSecrets[R]) find(name, secret string) (R, error) {
	key := sha256.Sum256([]byte(secret))
	s.mu.Lock()
	r := s.runs[key]
	s.mu.Unlock()
	if r == nil || r.name != name {
		var none R
		return none, httpapi.ErrUnauthorized
	}
	return r.run, nil
}
