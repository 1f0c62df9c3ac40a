package sqlstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// TestClaimAndStartNext: a claim that peeks tells when the earliest
// unpaused job still to come falls due, whether it claimed anything or not
// (an idle poll), leaving out paused jobs and the jobs it claimed; where
// the peek is a statement of its own (SQLite) a claim that does not ask
// makes none and tells nothing, and where it is the candidates' read
// (MySQL) it tells every time. PostgreSQL's claim tells nothing (its
// workers have the change feed).
func TestClaimAndStartNext(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, open dbtest.Open) {
		ctx := context.Background()
		st := open(t)
		peeks := st.Dialect().Jobs.ClaimPeek != ""
		if peeks != !strings.HasSuffix(t.Name(), "/postgres") {
			t.Fatalf("ClaimPeek set: %v; want it on SQLite and MySQL only", peeks)
		}
		api, err := scheduler.New(scheduler.Config{Store: st})
		if err != nil {
			t.Fatal(err)
		}
		create := func(name string, at time.Time, paused bool) {
			t.Helper()
			if _, _, err := api.Create(ctx, sqlease.Job{Name: name, Schedule: sqlease.Schedule{At: at}, Paused: paused}); err != nil {
				t.Fatal(err)
			}
		}
		claim := func(peek bool) ([]sqlstore.Claimed, sqlstore.ClaimNext) {
			t.Helper()
			c, next, err := st.ClaimAndStartNext(ctx, "w", 10, sqlstore.ClaimCursor{}, peek)
			if err != nil {
				t.Fatal(err)
			}
			if !peeks && next.Known {
				t.Fatalf("a dialect without ClaimPeek told the next due time")
			}
			return c, next
		}
		// near: the answer's instant, turned into this host's clock, is
		// that of the job (the database runs on this machine).
		near := func(what string, got, want time.Time) {
			t.Helper()
			if d := got.Sub(want); d < -50*time.Millisecond || d > 500*time.Millisecond {
				t.Errorf("%s: next due %s, want %s (off by %s)", what, got.Format(time.StampMilli), want.Format(time.StampMilli), d)
			}
		}

		c, next := claim(true)
		if len(c) != 0 || next.Known != peeks || !next.At.IsZero() {
			t.Fatalf("empty table: claimed %d, next %+v; want nothing claimed, none to come", len(c), next)
		}
		now, err := st.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		later := time.Now().Add(3 * time.Second)
		create("paused-sooner", now.Add(time.Second), true)
		create("later", later, false)
		c, next = claim(true)
		if len(c) != 0 || next.Known != peeks {
			t.Fatalf("nothing due: claimed %d, next %+v", len(c), next)
		}
		if peeks {
			near("nothing due (an idle poll)", next.At, later)
		}

		create("due", now.Add(-time.Second), false)
		c, next = claim(true)
		if len(c) != 1 || c[0].Name != "due" {
			t.Fatalf("claimed %d jobs, want due alone", len(c))
		}
		if peeks {
			near("after a claim", next.At, later)
		}

		// Without asking: MySQL's claim tells all the same; SQLite's
		// makes no read first and tells nothing.
		create("due2", now.Add(-time.Second), false)
		c, next = claim(false)
		if len(c) != 1 || c[0].Name != "due2" {
			t.Fatalf("claimed %d jobs, want due2 alone", len(c))
		}
		sqliteDialect := strings.HasSuffix(t.Name(), "/sqlite")
		if want := peeks && !sqliteDialect; next.Known != want {
			t.Errorf("a claim that did not ask to peek: told %v, want %v", next.Known, want)
		}

		// The jobs claimed (locked, due) are not what is to come.
		c, next = claim(true)
		if len(c) != 0 {
			t.Fatalf("claimed %d jobs locked by a claim before", len(c))
		}
		if peeks {
			near("with claimed jobs in the due index", next.At, later)
		}
	})
}
