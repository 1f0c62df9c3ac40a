package multiproc

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sqlease/sqlease/internal/ledger"
)

// Term is one leadership term of one worker as its events tell it.
type Term struct {
	Holder  string
	Epoch   int64
	Start   Event
	Stop    Event
	Stopped bool
}

// Summary is what Verify found, for scenario-specific assertions.
type Summary struct {
	Rows  []ledger.Row
	Terms map[int64][]Term // by epoch; more than one entry is itself a violation
}

// RowsOf returns the ledger rows of epoch.
func (s Summary) RowsOf(epoch int64) []ledger.Row {
	var out []ledger.Row
	for _, r := range s.Rows {
		if r.Epoch == epoch {
			out = append(out, r)
		}
	}
	return out
}

// Verify cross-checks the whole event log with the ledger, after the
// workers have stopped, and fails the test on any violation:
//
//   - ledger.Check: one holder per epoch, no stale-epoch write after a newer
//     epoch in id order or database time, ledger consistent with the lease row;
//   - every "acted" (a gate pass) lies inside a term of that worker and epoch:
//     the gate was entered before the worker's stopped_leading for the epoch;
//   - every fenced_ok has its ledger row (same holder and epoch), and no
//     fenced write that failed with ErrLeaseLost or ErrNotLeader committed;
//   - every ledger row was written by a worker that led that epoch (or by one
//     of extraHolders, rows the test wrote itself), and was reported, unless
//     the worker was SIGKILLed before it could report it;
//   - no two workers started leading under the same epoch.
func (f *Fleet) Verify(db *sql.DB, dialect, leasesTable string, extraHolders ...string) Summary {
	t := f.T()
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ledger.Check(ctx, db, dialect, leasesTable); err != nil {
		t.Errorf("ledger invariant violated: %v", err)
	}
	rows, err := ledger.Rows(ctx, db, dialect)
	if err != nil {
		t.Fatalf("reading the ledger: %v", err)
	}
	sum := Summary{Rows: rows, Terms: map[int64][]Term{}}

	type key struct {
		holder string
		epoch  int64
	}
	terms := map[key]*Term{}
	events := f.Events()
	for _, e := range events {
		if e.Ev != EvStartedLeading {
			continue
		}
		k := key{e.Holder, e.Epoch}
		if terms[k] != nil {
			t.Errorf("%s started leading epoch %d twice", e.Holder, e.Epoch)
			continue
		}
		terms[k] = &Term{Holder: e.Holder, Epoch: e.Epoch, Start: e}
	}
	// The elector runs OnStartedLeading in a goroutine of its own, so when a
	// term ends at once (its lease already past the local deadline when the
	// acquire returned) OnStoppedLeading may print first.
	for _, e := range events {
		if e.Ev != EvStoppedLeading {
			continue
		}
		tm := terms[key{e.Holder, e.Epoch}]
		switch {
		case tm == nil:
			t.Errorf("%s stopped leading epoch %d it never started", e.Holder, e.Epoch)
		case tm.Stopped:
			t.Errorf("%s stopped leading epoch %d twice", e.Holder, e.Epoch)
		default:
			tm.Stop, tm.Stopped = e, true
			if e.Index < tm.Start.Index {
				t.Logf("note: %s's OnStoppedLeading for epoch %d ran before its OnStartedLeading (started %s, stopped %s)",
					e.Holder, e.Epoch, tm.Start.T.Format("15:04:05.000000"), e.T.Format("15:04:05.000000"))
			}
		}
	}
	for _, tm := range terms {
		sum.Terms[tm.Epoch] = append(sum.Terms[tm.Epoch], *tm)
	}
	for epoch, ts := range sum.Terms {
		if len(ts) > 1 {
			t.Errorf("epoch %d was led by %d workers: %v and %v", epoch, len(ts), ts[0].Holder, ts[1].Holder)
		}
	}

	byNote := map[string]ledger.Row{}
	for _, r := range rows {
		byNote[r.Note] = r
	}
	reported := map[string]Event{}
	for _, e := range events {
		switch e.Ev {
		case EvActed:
			tm := terms[key{e.Holder, e.Epoch}]
			switch {
			case tm == nil:
				t.Errorf("follower passed the gate: %s acted under epoch %d it never led: %v", e.Holder, e.Epoch, e)
			case tm.Stopped && !e.GateT.Before(tm.Stop.T):
				t.Errorf("%s passed the gate %v after its term %d ended: %v", e.Holder, e.GateT.Sub(tm.Stop.T), e.Epoch, e)
			case e.Actor == "" && e.GateT.Before(tm.Start.T):
				t.Errorf("%s acted before its term %d started: %v", e.Holder, e.Epoch, e)
			}
		case EvFencedOK, EvFencedFailed:
			note := Note(e.Holder, e.Actor, e.Seq)
			reported[note] = e
			r, inLedger := byNote[note]
			switch {
			case e.Ev == EvFencedOK && !inLedger:
				t.Errorf("%s reported a committed fenced write that is not in the ledger: %v", e.Holder, e)
			case e.Ev == EvFencedOK && (r.Holder != e.Holder || r.Epoch != e.Epoch):
				t.Errorf("ledger row %v does not match the event %v", r, e)
			case e.Ev == EvFencedFailed && inLedger && (e.LeaseLost || e.NotLeader):
				t.Errorf("a fenced write refused with %q committed anyway: row %v", e.Err, r)
			}
		}
	}
	extra := map[string]bool{}
	for _, h := range extraHolders {
		extra[h] = true
	}
	for _, r := range rows {
		if extra[r.Holder] {
			continue
		}
		if terms[key{r.Holder, r.Epoch}] == nil {
			t.Errorf("ledger row %v written by a worker that never led epoch %d", r, r.Epoch)
		}
		if _, ok := reported[r.Note]; !ok {
			if p := f.Proc(r.Holder); p == nil || !p.Killed() {
				t.Errorf("ledger row %v was never reported by its worker", r)
			}
		}
	}
	return sum
}

// String summarises the terms, for logs.
func (s Summary) String() string {
	out := ""
	for e := int64(1); len(s.Terms) > 0 && e <= maxEpoch(s); e++ {
		ts := s.Terms[e]
		n := len(s.RowsOf(e))
		if len(ts) == 0 {
			if n > 0 {
				out += fmt.Sprintf(" [epoch %d: no term, %d rows]", e, n)
			}
			continue
		}
		out += fmt.Sprintf(" [epoch %d: %s, %d rows]", e, ts[0].Holder, n)
	}
	return out
}

func maxEpoch(s Summary) int64 {
	var m int64
	for e := range s.Terms {
		m = max(m, e)
	}
	return m
}
