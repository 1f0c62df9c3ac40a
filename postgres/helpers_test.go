package postgres_test

import (
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// createJobs creates jobs on st through a scheduler that is never run and
// returns their ids, in order.
func createJobs(t *testing.T, st *sqlstore.Store, jobs ...sqlease.Job) []int64 {
	t.Helper()
	sched, err := scheduler.New(scheduler.Config{Store: st, Holder: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		s, _, err := sched.Create(t.Context(), j)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = s.ID
	}
	return ids
}

// leaderTokens acquires the lease "lead" for "new" on st and returns its
// token, and three tokens whose lease is not held: another holder's, a
// later epoch's, and an expired lease's ("short"). The self-fenced
// statements must write under the first and under none of the others.
func leaderTokens(t *testing.T, st *sqlstore.Store) (tok sqlease.Token, notHeld []sqlease.Token) {
	t.Helper()
	lease, err := st.Acquire(t.Context(), "lead", "new", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tok = lease.Token()
	if _, err := st.Acquire(t.Context(), "short", "new", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	return tok, []sqlease.Token{
		{Name: "lead", Holder: "other", Epoch: tok.Epoch},
		{Name: "lead", Holder: "new", Epoch: tok.Epoch + 1},
		{Name: "short", Holder: "new", Epoch: tok.Epoch}, // expired
	}
}
