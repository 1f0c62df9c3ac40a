package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// The placement scenario (issue 32): what the statements of placement by
// node (sqlstore/placement.go) cost at scale, on a fresh database with N
// singletons and three nodes' member leases: one statement placing all N on
// node a; the Placement read and a node's Assigned read (an idle node's
// reads, once per renew interval); a save fenced by the generation and the
// member lease (SaveAssigned); node a's lease released (dead), one
// statement placing all of its singletons on node b; a give of a third of
// them to node c. Times are wall-clock round trips from this process, one
// statement each (medians for the repeated ones).

type placementRun struct {
	placeAll, reassign, give   time.Duration
	placement, assigned, save  time.Duration
	placed, reassigned, givenN int64
}

func placementScenario(ctx context.Context, e *env, dialect string, n, runs int) bool {
	fmt.Printf("\n== placement by node — %s, %d singletons, 3 member leases (sqlstore/placement.go statements)\n", dialect, n)
	var rs []placementRun
	if !rounds(ctx, e, runs, func() (placementRun, error) { return runPlacement(ctx, e, dialect, n) }, func(i int, bg float64, r placementRun) {
		fmt.Printf("  run %d [bg %.0f%%]: place all %d on a %s; Placement %s; Assigned (%d rows) %s; SaveAssigned %s; a dead, reassign %d to b %s; give %d to c %s\n",
			i, bg*100, r.placed, fmtDur(r.placeAll), fmtDur(r.placement), n, fmtDur(r.assigned), fmtDur(r.save), r.reassigned, fmtDur(r.reassign), r.givenN, fmtDur(r.give))
		rs = append(rs, r)
	}) {
		return false
	}
	if len(rs) == 0 {
		return true
	}
	med := func(f func(placementRun) time.Duration) string {
		return fmtDur(time.Duration(medianOf(metric(rs, func(r placementRun) float64 { return float64(f(r)) }))))
	}
	fmt.Printf("  median: place all %s; Placement %s; Assigned %s; SaveAssigned %s; reassign a dead node's %d %s; give %d %s\n",
		med(func(r placementRun) time.Duration { return r.placeAll }), med(func(r placementRun) time.Duration { return r.placement }),
		med(func(r placementRun) time.Duration { return r.assigned }), med(func(r placementRun) time.Duration { return r.save }),
		n, med(func(r placementRun) time.Duration { return r.reassign }), n/3, med(func(r placementRun) time.Duration { return r.give }))
	return true
}

func runPlacement(ctx context.Context, e *env, dialect string, n int) (res placementRun, err error) {
	_, st, done, err := e.migrated(ctx, dialect)
	if err != nil {
		return res, err
	}
	defer done()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("s-%06d", i)
	}
	if err := ensureMany(ctx, st, names); err != nil {
		return res, err
	}
	member := func(h string) (sqlease.Token, error) {
		l, err := st.Acquire(ctx, sqlstore.MemberLeasePrefix+h, h, time.Minute)
		return l.Token(), err
	}
	a, err := member("a")
	if err != nil {
		return res, err
	}
	b, err := member("b")
	if err != nil {
		return res, err
	}
	if _, err := member("c"); err != nil {
		return res, err
	}
	timed := func(f func() error) (time.Duration, error) {
		t0 := time.Now()
		err := f()
		return time.Since(t0), err
	}
	if res.placeAll, err = timed(func() error {
		res.placed, err = st.PlaceSingletons(ctx, a, names, n)
		return err
	}); err != nil {
		return res, err
	}
	var mine []sqlstore.Assignment
	res.placement, err = medianTimed(20, func() error { _, err := st.Placement(ctx); return err })
	if err != nil {
		return res, err
	}
	res.assigned, err = medianTimed(5, func() error { mine, err = st.AssignedSingletons(ctx, a); return err })
	if err != nil {
		return res, err
	}
	if len(mine) == 0 {
		return res, fmt.Errorf("nothing assigned to a")
	}
	tok := sqlease.Token{Holder: "a", Epoch: mine[0].Generation}
	if err := st.StartAssigned(ctx, mine[0].Name, tok); err != nil {
		return res, err
	}
	state, _ := json.Marshal(map[string]int{"cursor": 1})
	if res.save, err = medianTimed(200, func() error { return st.SaveAssigned(ctx, mine[0].Name, tok, state) }); err != nil {
		return res, err
	}
	if err := st.Release(ctx, a); err != nil {
		return res, err
	}
	if res.reassign, err = timed(func() error {
		res.reassigned, err = st.PlaceSingletons(ctx, b, names, n)
		return err
	}); err != nil {
		return res, err
	}
	third := names[:n/3]
	if res.give, err = timed(func() error {
		res.givenN, err = st.GiveSingletons(ctx, b, "c", third)
		return err
	}); err != nil {
		return res, err
	}
	if res.placed != int64(n) || res.reassigned != int64(n) || res.givenN != int64(len(third)) {
		return res, fmt.Errorf("placed %d, reassigned %d, gave %d; want %d, %d, %d", res.placed, res.reassigned, res.givenN, n, n, len(third))
	}
	return res, nil
}

// medianTimed runs f k times and returns the median duration.
func medianTimed(k int, f func() error) (time.Duration, error) {
	ds := make([]time.Duration, k)
	for i := range ds {
		t0 := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		ds[i] = time.Since(t0)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[k/2], nil
}

// ensureMany creates the singletons' rows, many per transaction.
func ensureMany(ctx context.Context, st *sqlstore.Store, names []string) error {
	const chunk = 500
	for lo := 0; lo < len(names); lo += chunk {
		tx, err := st.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		q := st.Dialect().Singletons.Ensure
		for _, name := range names[lo:min(lo+chunk, len(names))] {
			if _, err := tx.ExecContext(ctx, q, name); err != nil {
				tx.Rollback()
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}
