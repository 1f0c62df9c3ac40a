package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// testSingletonStartMany: StartManyAssigned starts a batch of singletons
// in one statement, each fenced as StartAssigned — its assignment is the
// pair passed (node, generation) and the node's member lease is live in
// database time — and returns the saved state of each one it started. A
// refused pair leaves its row as it was and does not hold back the others.
// Then a race: a node whose member lease expires starts its batch again
// and again while another node takes the singletons over and starts them:
// no singleton is started by both under its current generation, the old
// node's starts and saves are refused once its lease has expired, and the
// new node reads the states saved before.
func testSingletonStartMany(t *testing.T, s *sqlstore.Store) {
	ctx := t.Context()
	names := ensureSingletons(t, s, "m%d", 8)
	a := mustAcquire(t, s, sqlstore.MemberLeasePrefix+"ma", "ma", time.Minute).Token()
	b := mustAcquire(t, s, sqlstore.MemberLeasePrefix+"mb", "mb", time.Minute).Token()
	if n, err := placeRetrying(ctx, s, a, names[:6], 100); err != nil || n != 6 {
		t.Fatalf("a places 6: %d, %v", n, err)
	}
	if n, err := placeRetrying(ctx, s, b, names[6:], 100); err != nil || n != 2 {
		t.Fatalf("b places 2: %d, %v", n, err)
	}
	mine, err := s.AssignedSingletons(ctx, a)
	if err != nil || len(mine) != 6 {
		t.Fatalf("a's assignments: %+v, %v", mine, err)
	}
	gen := map[string]int64{}
	for _, m := range mine {
		gen[m.Name] = m.Generation
	}
	theirs, err := s.AssignedSingletons(ctx, b)
	if err != nil || len(theirs) != 2 {
		t.Fatalf("b's assignments: %+v, %v", theirs, err)
	}
	// m1 ran and saved under its generation before the batch.
	m1 := sqlease.Token{Holder: "ma", Epoch: gen["m1"]}
	if err := s.StartAssigned(ctx, "m1", m1); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveAssigned(ctx, "m1", m1, []byte(`{"n":5}`)); err != nil {
		t.Fatal(err)
	}
	before, err := s.Singleton(ctx, "m1")
	if err != nil {
		t.Fatal(err)
	}

	// The batch: a's own, m2 under a generation not its assignment's, b's
	// m6 under b's generation, and a name that does not exist.
	starts := []sqlstore.Assignment{
		{Name: "m0", Generation: gen["m0"]}, {Name: "m1", Generation: gen["m1"]}, {Name: "m2", Generation: gen["m2"] + 1},
		{Name: "m3", Generation: gen["m3"]}, {Name: "m4", Generation: gen["m4"]}, {Name: "m5", Generation: gen["m5"]},
		{Name: "m6", Generation: theirs[0].Generation}, {Name: "nope", Generation: 1},
	}
	got, err := s.StartManyAssigned(ctx, "ma", starts)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"m0", "m1", "m3", "m4", "m5"}
	if len(got) != len(want) {
		t.Fatalf("started %v, want exactly %v", keys(got), want)
	}
	for _, n := range want {
		st, ok := got[n]
		if !ok {
			t.Fatalf("%s not started (%v)", n, keys(got))
		}
		if n == "m1" && string(st) != `{"n":5}` || n != "m1" && st != nil {
			t.Errorf("%s started with state %q", n, st)
		}
		row, err := s.Singleton(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if row.Holder != "ma" || row.Epoch != gen[n] || row.StartedAt.IsZero() {
			t.Errorf("%s after the start: holder %q epoch %d started %v, want ma, %d", n, row.Holder, row.Epoch, row.StartedAt, gen[n])
		}
		// Started: its saves are accepted under (node, generation).
		if err := s.SaveAssigned(ctx, n, sqlease.Token{Holder: "ma", Epoch: gen[n]}, []byte(`{"n":6}`)); err != nil {
			t.Errorf("save of %s after the batch start: %v", n, err)
		}
	}
	if row, _ := s.Singleton(ctx, "m1"); row.Restarts != before.Restarts+1 {
		t.Errorf("m1's restarts %d after a second start, want %d", row.Restarts, before.Restarts+1)
	}
	for _, n := range []string{"m2", "m6"} {
		row, err := s.Singleton(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if row.Holder != "" || !row.StartedAt.IsZero() {
			t.Errorf("%s started by a refused pair: holder %q started %v", n, row.Holder, row.StartedAt)
		}
	}
	// An empty batch starts nothing.
	if got, err := s.StartManyAssigned(ctx, "ma", nil); err != nil || len(got) != 0 {
		t.Fatalf("empty batch: %v, %v", got, err)
	}

	// a's member lease expires: its batch is refused although every
	// generation is still its assignment's.
	own := starts[:6]
	own[2].Generation = gen["m2"]
	if err := s.RenewMember(ctx, a, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitExpired(t, s, a.Name)
	if got, err := s.StartManyAssigned(ctx, "ma", own); err != nil || len(got) != 0 {
		t.Fatalf("a starts with its member lease expired: %v, %v", keys(got), err)
	}

	// The race: a keeps starting its batch while b places and starts them.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var aErr error
	aStarted := map[string]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			got, err := s.StartManyAssigned(ctx, "ma", own)
			if err != nil && !errors.Is(err, sqlease.ErrTransient) {
				aErr = err
				return
			}
			for n := range got {
				aStarted[n] = true
			}
		}
	}()
	var placed int64
	for attempt := 0; placed < 6 && attempt < 50; attempt++ {
		n, err := placeRetrying(ctx, s, b, names[:6], 100)
		if err != nil {
			t.Fatal(err)
		}
		placed += n
	}
	theirs, err = s.AssignedSingletons(ctx, b)
	if err != nil || len(theirs) != 8 {
		t.Fatalf("b's assignments after the takeover: %+v, %v", theirs, err)
	}
	var bStarts []sqlstore.Assignment
	for _, as := range theirs {
		if as.Name != "m6" && as.Name != "m7" {
			if as.Generation <= gen[as.Name] {
				t.Errorf("%s taken over under generation %d, not above a's %d", as.Name, as.Generation, gen[as.Name])
			}
			bStarts = append(bStarts, as)
		}
	}
	var bGot map[string][]byte
	for attempt := 0; ; attempt++ {
		bGot, err = s.StartManyAssigned(ctx, "mb", bStarts)
		if err == nil || !errors.Is(err, sqlease.ErrTransient) || attempt == 20 {
			break
		}
		time.Sleep(time.Duration(attempt+1) * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if err != nil || aErr != nil {
		t.Fatalf("b's start: %v; a's starts: %v", err, aErr)
	}
	if len(aStarted) != 0 {
		t.Errorf("a started %v after its member lease expired", aStarted)
	}
	if len(bGot) != len(bStarts) {
		t.Fatalf("b started %v of %d", keys(bGot), len(bStarts))
	}
	for _, as := range bStarts {
		// The state a saved before is the state b starts with.
		want := `{"n":6}`
		if as.Name == "m2" {
			want = "" // never started by a: nothing saved
		}
		if st := bGot[as.Name]; string(st) != want {
			t.Errorf("b starts %s with state %q, want a's last save", as.Name, st)
		}
		row, err := s.Singleton(ctx, as.Name)
		if err != nil {
			t.Fatal(err)
		}
		if row.Holder != "mb" || row.Epoch != as.Generation {
			t.Errorf("%s after b's start: holder %q epoch %d, want mb, %d", as.Name, row.Holder, row.Epoch, as.Generation)
		}
		if err := s.SaveAssigned(ctx, as.Name, sqlease.Token{Holder: "ma", Epoch: gen[as.Name]}, []byte(`{"n":0}`)); !errors.Is(err, sqlease.ErrLeaseLost) {
			t.Errorf("a's save of %s after the takeover: %v, want ErrLeaseLost", as.Name, err)
		}
	}
	// a's old pairs stay refused under b's live lease too.
	if got, err := s.StartManyAssigned(ctx, "ma", own); err != nil || len(got) != 0 {
		t.Fatalf("a starts after the takeover: %v, %v", keys(got), err)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
