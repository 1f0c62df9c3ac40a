package scheduler

import (
	"errors"
	"testing"
	"time"

	"github.com/sqlease/sqlease/sqlstore"
)

// TestClaimFrom pins where a worker's next claim starts: past its full
// claims, at the start after a short or failed one (at once after a short
// one from the cursor), and at the start once interval has passed since the
// last claim from the start, however long the backlog lasts.
func TestClaimFrom(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	job := func(id int64, at time.Time) sqlstore.Claimed {
		var c sqlstore.Claimed
		c.ID, c.NextRunAt = id, at
		return c
	}
	full := []sqlstore.Claimed{job(7, t0), job(3, t0.Add(time.Second)), job(9, t0)} // not in order
	var f claimFrom
	f.update(full, 3, nil, t0, time.Second)
	if want := (sqlstore.ClaimCursor{NextRunAt: t0.Add(time.Second), ID: 3}); f.after != want || f.again {
		t.Fatalf("after a full claim from the start: %+v again=%v, want %+v", f.after, f.again, want)
	}
	f.update([]sqlstore.Claimed{job(4, t0.Add(time.Second)), job(1, t0.Add(2*time.Second))}, 2, nil, t0.Add(500*time.Millisecond), time.Second)
	if want := (sqlstore.ClaimCursor{NextRunAt: t0.Add(2 * time.Second), ID: 1}); f.after != want {
		t.Fatalf("after a full claim from the cursor: %+v, want %+v", f.after, want)
	}
	// A full claim sent an interval after the last one from the start: the
	// next starts from the start.
	f.update([]sqlstore.Claimed{job(5, t0.Add(3*time.Second))}, 1, nil, t0.Add(time.Second), time.Second)
	if !f.after.IsZero() || f.again {
		t.Fatalf("an interval after the last claim from the start: %+v again=%v, want the start", f.after, f.again)
	}
	f.update(full, 3, nil, t0.Add(2*time.Second), time.Second)
	f.update(full[:1], 2, nil, t0.Add(2100*time.Millisecond), time.Second)
	if !f.after.IsZero() || !f.again {
		t.Fatalf("after a short claim from the cursor: %+v again=%v, want the start, at once", f.after, f.again)
	}
	f.update(full[:1], 2, nil, t0.Add(2200*time.Millisecond), time.Second)
	if !f.after.IsZero() || f.again {
		t.Fatalf("after a short claim from the start: %+v again=%v, want the start at the next poll", f.after, f.again)
	}
	f.update(full, 3, nil, t0.Add(3*time.Second), time.Second)
	f.update(nil, 3, errors.New("boom"), t0.Add(3100*time.Millisecond), time.Second)
	if !f.after.IsZero() || f.again {
		t.Fatalf("after a failed claim: %+v again=%v, want the start at the next poll", f.after, f.again)
	}
}
