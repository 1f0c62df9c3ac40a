package sqlstore

import (
	"context"
	"fmt"

	"github.com/sqlease/sqlease"
)

// HasStartRunsFenced reports whether StartRunsFenced can be used: the
// dialect has its statement.
func (s *Store) HasStartRunsFenced() bool {
	return s.q().StartRunsFenced != "" && s.q().StartRuns != ""
}

// StartRunsFenced is StartRuns fenced by tok in its one statement, outside
// any transaction (see FinishRunsFenced): a leader's start of the recurring
// jobs its claim took costs one round trip instead of a fenced
// transaction's five. When the fence fails nothing is started and every
// started[i] is false, as when every lock is lost or every attempt exists:
// a caller that gets no run started learns why by starting in Fenced (the
// statement wrote nothing, so it may). Only where HasStartRunsFenced.
func (s *Store) StartRunsFenced(ctx context.Context, tok sqlease.Token, reqs []StartReq) (started []bool, err error) {
	if err := validateToken(tok); err != nil {
		return nil, err
	}
	if !s.HasStartRunsFenced() {
		return nil, fmt.Errorf("%w: start runs fenced by statement: not where the dialect has no StartRunsFenced", sqlease.ErrInvalidConfig)
	}
	return s.startRuns(ctx, nil, &tok, reqs)
}
