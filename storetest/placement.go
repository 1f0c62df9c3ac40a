package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// testSingletonPlacement: singletons placed by node (issue 32,
// model/assign.pml). A node places singletons on its live member lease in
// one statement, up to a limit, only those not placed on a live node;
// every assignment raises the generation above any token the singleton had
// (its old lease epoch included); a save is one statement fenced by the
// generation and by the node's lease being live in database time — so it
// is refused once that lease has expired even before anybody reassigns
// the singleton, and after a reassignment; one statement moves every
// singleton of a dead node; a give moves singletons to a live node only.
func testSingletonPlacement(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	names := ensureSingletons(t, s, "p%d", 5)
	// p0 ran under the old scheme: its own lease, epoch 7.
	for range 6 {
		l := mustAcquire(t, s, "singleton:p0", "old", 30*time.Millisecond)
		waitExpired(t, s, "singleton:p0")
		_ = l
	}
	old := mustAcquire(t, s, "singleton:p0", "old", time.Minute).Token()
	if err := s.Fenced(ctx, old, func(tx *sql.Tx) error { return s.StartSingleton(ctx, tx, "p0", old) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, old); err != nil {
		t.Fatal(err)
	}

	// Node a, with a short lease; node b.
	a := mustAcquire(t, s, sqlstore.MemberLeasePrefix+"a", "a", 400*time.Millisecond).Token()
	b := mustAcquire(t, s, sqlstore.MemberLeasePrefix+"b", "b", time.Minute).Token()

	v, err := s.Placement(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.Unplaced != len(names) || len(v.Nodes) != 2 || v.Now.IsZero() {
		t.Fatalf("placement before any assignment: %+v, want %d unplaced on 2 live nodes", v, len(names))
	}

	// A limit, and only the names passed.
	if n, err := s.PlaceSingletons(ctx, a, names[:4], 3); err != nil || n != 3 {
		t.Fatalf("a places 3 of 4: %d, %v", n, err)
	}
	if n, err := s.PlaceSingletons(ctx, a, names[:4], 3); err != nil || n != 1 {
		t.Fatalf("a places the rest of the 4: %d, %v, want 1", n, err)
	}
	// b cannot take what a's live lease holds.
	if n, err := s.PlaceSingletons(ctx, b, names, 100); err != nil || n != 1 {
		t.Fatalf("b places while a lives: %d, %v, want only p4", n, err)
	}
	// A token that is not the live lease places nothing.
	if n, err := s.PlaceSingletons(ctx, sqlease.Token{Holder: "b", Epoch: b.Epoch + 1}, names, 100); err != nil || n != 0 {
		t.Fatalf("a stale member token places: %d, %v", n, err)
	}
	mine, err := s.AssignedSingletons(ctx, a)
	if err != nil || len(mine) != 4 || mine[0].Name != "p0" {
		t.Fatalf("a's assignments: %+v, %v", mine, err)
	}
	gen := map[string]int64{}
	for _, m := range mine {
		gen[m.Name] = m.Generation
	}
	if gen["p0"] <= old.Epoch {
		t.Fatalf("p0's generation %d is not above its old lease epoch %d", gen["p0"], old.Epoch)
	}
	v, _ = s.Placement(ctx)
	if v.Unplaced != 0 || len(v.Nodes) != 2 {
		t.Fatalf("placement: %+v", v)
	}
	for _, n := range v.Nodes {
		if want := map[string]int{"a": 4, "b": 1}[n.Holder]; n.Assigned != want {
			t.Fatalf("node %s holds %d, want %d (%+v)", n.Holder, n.Assigned, want, v)
		}
	}

	// a runs p1 and saves under its generation.
	p1 := sqlease.Token{Holder: "a", Epoch: gen["p1"]}
	if err := s.StartAssigned(ctx, "p1", p1); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveAssigned(ctx, "p1", p1, []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.HeartbeatAssigned(ctx, "p1", p1); err != nil {
		t.Fatal(err)
	}
	if err := s.FailAssigned(ctx, "p1", p1, "exit status 3", true); err != nil {
		t.Fatal(err)
	}
	// Another generation, another holder, a singleton not started: refused.
	for what, err := range map[string]error{
		"an older generation": s.SaveAssigned(ctx, "p1", sqlease.Token{Holder: "a", Epoch: gen["p1"] - 1}, []byte(`{"n":9}`)),
		"a newer generation":  s.SaveAssigned(ctx, "p1", sqlease.Token{Holder: "a", Epoch: gen["p1"] + 1}, []byte(`{"n":9}`)),
		"another node":        s.SaveAssigned(ctx, "p1", sqlease.Token{Holder: "b", Epoch: gen["p1"]}, []byte(`{"n":9}`)),
		"not started":         s.SaveAssigned(ctx, "p2", sqlease.Token{Holder: "a", Epoch: gen["p2"]}, []byte(`{"n":9}`)),
		"start by b":          s.StartAssigned(ctx, "p1", sqlease.Token{Holder: "b", Epoch: gen["p1"]}),
	} {
		if !errors.Is(err, sqlease.ErrLeaseLost) {
			t.Errorf("save under %s: %v, want ErrLeaseLost", what, err)
		}
	}

	// RenewMember renews (one statement on every dialect) and refuses a
	// token that does not hold the lease.
	if err := s.RenewMember(ctx, b, time.Minute); err != nil {
		t.Fatalf("RenewMember: %v", err)
	}
	if err := s.RenewMember(ctx, sqlease.Token{Name: b.Name, Holder: "b", Epoch: b.Epoch + 1}, time.Minute); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("RenewMember under a wrong epoch: %v, want ErrLeaseLost", err)
	}

	// a's lease expires: its saves are refused at once, before anybody
	// reassigns p1 (the generation alone would still accept them).
	waitExpired(t, s, sqlstore.MemberLeasePrefix+"a")
	if err := s.RenewMember(ctx, a, time.Minute); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("RenewMember of an expired lease: %v, want ErrLeaseLost", err)
	}
	if err := s.SaveAssigned(ctx, "p1", p1, []byte(`{"n":2}`)); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("save after a's member lease expired: %v, want ErrLeaseLost", err)
	}
	if err := s.HeartbeatAssigned(ctx, "p1", p1); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("heartbeat after a's member lease expired: %v, want ErrLeaseLost", err)
	}
	if r, _ := s.Singleton(ctx, "p1"); string(r.State) != `{"n":1}` || r.Node != "a" || r.Generation != gen["p1"] {
		t.Fatalf("p1 after refused saves: %+v", r)
	}
	v, _ = s.Placement(ctx)
	if v.Unplaced != 4 || len(v.Nodes) != 1 {
		t.Fatalf("placement after a died: %+v, want a's 4 unplaced", v)
	}
	// a acquires its member lease again (a new epoch): its old
	// assignments are not its own any more.
	a2 := mustAcquire(t, s, sqlstore.MemberLeasePrefix+"a", "a", time.Minute).Token()
	if got, err := s.AssignedSingletons(ctx, a2); err != nil || len(got) != 0 {
		t.Fatalf("a's assignments under its new epoch: %+v, %v", got, err)
	}
	// One statement moves every singleton of the dead term to b.
	if n, err := s.PlaceSingletons(ctx, b, names, 100); err != nil || n != 4 {
		t.Fatalf("b takes a's singletons: %d, %v, want 4", n, err)
	}
	bs, _ := s.AssignedSingletons(ctx, b)
	if len(bs) != 5 {
		t.Fatalf("b's assignments: %+v", bs)
	}
	for _, m := range bs {
		if m.Name != "p4" && m.Generation <= gen[m.Name] {
			t.Fatalf("%s: generation %d after the reassignment, was %d", m.Name, m.Generation, gen[m.Name])
		}
		gen[m.Name] = m.Generation
	}
	if err := s.SaveAssigned(ctx, "p1", p1, []byte(`{"n":3}`)); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("a's save after the reassignment: %v", err)
	}
	pb := sqlease.Token{Holder: "b", Epoch: gen["p1"]}
	if err := s.StartAssigned(ctx, "p1", pb); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveAssigned(ctx, "p1", pb, []byte(`{"n":4}`)); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Singleton(ctx, "p1"); string(r.State) != `{"n":4}` || r.Holder != "b" || r.Epoch != gen["p1"] || r.Restarts != 1 {
		t.Fatalf("p1 on b: %+v", r)
	}

	// b gives p1 and p2 to a (live again): generations grow, b's saves are
	// refused, a's accepted. A give to a node without a live lease moves
	// nothing, and so does a give by a token that does not hold them.
	if n, err := s.GiveSingletons(ctx, b, "nobody", []string{"p1"}); err != nil || n != 0 {
		t.Fatalf("a give to a node without a lease: %d, %v", n, err)
	}
	if n, err := s.GiveSingletons(ctx, a2, "b", []string{"p1"}); err != nil || n != 0 {
		t.Fatalf("a give by a node that does not hold it: %d, %v", n, err)
	}
	if n, err := s.GiveSingletons(ctx, b, "a", []string{"p1", "p2"}); err != nil || n != 2 {
		t.Fatalf("b gives p1 and p2 to a: %d, %v", n, err)
	}
	if err := s.SaveAssigned(ctx, "p1", pb, []byte(`{"n":5}`)); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("b's save after its give: %v", err)
	}
	got, _ := s.AssignedSingletons(ctx, a2)
	if len(got) != 2 || got[0].Name != "p1" || got[0].Generation <= gen["p1"] {
		t.Fatalf("a's assignments after the give: %+v (p1 was %d)", got, gen["p1"])
	}
	pa := sqlease.Token{Holder: "a", Epoch: got[0].Generation}
	if err := s.StartAssigned(ctx, "p1", pa); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveAssigned(ctx, "p1", pa, []byte(`{"n":6}`)); err != nil {
		t.Fatal(err)
	}

	// A paused daemon singleton is not placed.
	if _, _, err := s.CreateSingleton(ctx, "d", []byte(`{"name":"d"}`), "h"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSingletonPaused(ctx, "d", true); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PlaceSingletons(ctx, b, []string{"d"}, 10); err != nil || n != 0 {
		t.Fatalf("placing a paused singleton: %d, %v", n, err)
	}
}

// testSingletonPlacementRace: nodes placing the same orphans at once take
// each exactly once between them (no lost update, no double assignment),
// and every generation grows.
func testSingletonPlacementRace(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	names := ensureSingletons(t, s, "r%02d", 40)
	toks := make([]sqlease.Token, 3)
	for i := range toks {
		h := fmt.Sprintf("n%d", i)
		toks[i] = mustAcquire(t, s, sqlstore.MemberLeasePrefix+h, h, time.Minute).Token()
	}
	var wg sync.WaitGroup
	placed := make([]int64, len(toks))
	errs := make([]error, len(toks))
	for i, tok := range toks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				n, err := placeRetrying(ctx, s, tok, names, 5)
				if err != nil {
					errs[i] = err
					return
				}
				placed[i] += n
			}
		}()
	}
	wg.Wait()
	total := int64(0)
	for i := range toks {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		total += placed[i]
	}
	seen := map[string]bool{}
	for _, tok := range toks {
		got, err := s.AssignedSingletons(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range got {
			if seen[a.Name] || a.Generation != 1 {
				t.Fatalf("%s assigned twice or with generation %d", a.Name, a.Generation)
			}
			seen[a.Name] = true
		}
	}
	if total != int64(len(names)) || len(seen) != len(names) {
		t.Fatalf("placed %d in all (by node %v), %d distinct, want %d", total, placed, len(seen), len(names))
	}
}

// ensureSingletons ensures the singletons named format(0) … format(n-1)
// (library singletons) and returns their names in that order.
func ensureSingletons(t *testing.T, s *sqlstore.Store, format string, n int) []string {
	t.Helper()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf(format, i)
		if err := s.EnsureSingleton(t.Context(), names[i]); err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// placeRetrying retries a placement that failed on a transient error (a
// deadlock victim, SQLite's busy writer): the statement changed nothing.
func placeRetrying(ctx context.Context, s *sqlstore.Store, tok sqlease.Token, names []string, limit int) (int64, error) {
	for attempt := 0; ; attempt++ {
		n, err := s.PlaceSingletons(ctx, tok, names, limit)
		if err == nil || !errors.Is(err, sqlease.ErrTransient) || attempt == 20 {
			return n, err
		}
		time.Sleep(time.Duration(attempt+1) * time.Millisecond)
	}
}
