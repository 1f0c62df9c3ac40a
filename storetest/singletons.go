package storetest

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// testSingletonState: a singleton's row is created once; a start, a save
// and a heartbeat commit only under the lease and only for the (holder,
// epoch) that started it — a deposed holder's save changes nothing even
// inside a transaction fenced by its own (still valid, then re-acquired)
// lease — and times are the database's.
func testSingletonState(t *testing.T, s *sqlstore.Store) {
	ctx := context.Background()
	const name = "counter"
	for range 2 { // idempotent
		if err := s.EnsureSingleton(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Singleton(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != nil || r.Epoch != 0 || r.Holder != "" || !r.HeartbeatAt.IsZero() {
		t.Fatalf("a new singleton: %+v", r)
	}
	if _, err := s.Singleton(ctx, "absent"); !errors.Is(err, sqlease.ErrNoJob) {
		t.Fatalf("missing singleton: %v", err)
	}

	a := mustAcquire(t, s, "singleton:"+name, "a", 300*time.Millisecond).Token()
	if err := s.Fenced(ctx, a, func(tx *sql.Tx) error {
		if err := s.StartSingleton(ctx, tx, name, a); err != nil {
			return err
		}
		return s.SaveSingleton(ctx, tx, name, a, []byte(`{"n":1}`))
	}); err != nil {
		t.Fatal(err)
	}
	r, err = s.Singleton(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if string(r.State) != `{"n":1}` || r.Holder != "a" || r.Epoch != a.Epoch || r.Restarts != 0 {
		t.Fatalf("after a's start and save (the first start is no restart): %+v", r)
	}
	if r.StateSavedAt.IsZero() || r.HeartbeatAt.Before(r.StartedAt) || r.Now.Before(r.StateSavedAt) {
		t.Fatalf("times: %+v", r)
	}
	checkSaneTime(t, "state_saved_at", r.StateSavedAt, time.Now())

	// a's lease expires; b takes it and starts the singleton.
	waitExpired(t, s, "singleton:"+name)
	b := mustAcquire(t, s, "singleton:"+name, "b", time.Minute).Token()
	if err := s.Fenced(ctx, b, func(tx *sql.Tx) error { return s.StartSingleton(ctx, tx, name, b) }); err != nil {
		t.Fatal(err)
	}
	// a's late save is refused by the fence...
	err = s.Fenced(ctx, a, func(tx *sql.Tx) error { return s.SaveSingleton(ctx, tx, name, a, []byte(`{"n":0}`)) })
	if !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("a's save after b took over: %v, want ErrLeaseLost", err)
	}
	// ... and by the row's (holder, epoch), even inside b's fence.
	err = s.Fenced(ctx, b, func(tx *sql.Tx) error { return s.SaveSingleton(ctx, tx, name, a, []byte(`{"n":0}`)) })
	if !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("a save for a's epoch inside b's fence: %v, want ErrLeaseLost", err)
	}
	err = s.Fenced(ctx, b, func(tx *sql.Tx) error { return s.HeartbeatSingleton(ctx, tx, name, a) })
	if !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("a heartbeat for a's epoch inside b's fence: %v, want ErrLeaseLost", err)
	}
	before, _ := s.Singleton(ctx, name)
	if err := s.Fenced(ctx, b, func(tx *sql.Tx) error { return s.HeartbeatSingleton(ctx, tx, name, b) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Fenced(ctx, b, func(tx *sql.Tx) error { return s.SaveSingleton(ctx, tx, name, b, []byte(`{"n":2}`)) }); err != nil {
		t.Fatal(err)
	}
	r, _ = s.Singleton(ctx, name)
	if string(r.State) != `{"n":2}` || r.Holder != "b" || r.Epoch != b.Epoch || r.Restarts != 1 || r.HeartbeatAt.Before(before.HeartbeatAt) {
		t.Fatalf("after b's heartbeat and save: %+v (before %+v)", r, before)
	}
	all, err := s.Singletons(ctx)
	if err != nil || len(all) != 1 || all[0].Name != name || string(all[0].State) != `{"n":2}` {
		t.Fatalf("list: %+v %v", all, err)
	}
}

// testSingletonPages: DaemonSingletons pages the daemon singletons by name
// (keyset: each page starts after the last name of the one before), skips
// library singletons, and returns every daemon singleton exactly once.
func testSingletonPages(t *testing.T, s *sqlstore.Store) {
	ctx := context.Background()
	daemon := []string{"a-b", "a.b", "a_b", "ab", "b", "b0", "z"}
	for _, name := range daemon {
		if _, _, err := s.CreateSingleton(ctx, name, []byte(`{"name":"`+name+`"}`), "h-"+name); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a", "a0", "y"} { // library singletons
		if err := s.EnsureSingleton(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.DaemonSingletons(ctx, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(daemon) {
		t.Fatalf("one read: %d singletons, want %d", len(all), len(daemon))
	}
	var seen []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > len(daemon) {
			t.Fatalf("too many pages: %v", seen)
		}
		page, err := s.DaemonSingletons(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 2 {
			t.Fatalf("page of %d rows with limit 2", len(page))
		}
		for i, r := range page {
			if r.Spec == nil || r.SpecHash != "h-"+r.Name || r.Name != all[len(seen)].Name {
				t.Fatalf("page %d row %d: %+v, want %s", pages, i, r, all[len(seen)].Name)
			}
			seen = append(seen, r.Name)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].Name
	}
	if len(seen) != len(daemon) {
		t.Fatalf("paged through %v, want %v", seen, daemon)
	}
}

// testSingletonFailures: a run that ended is recorded under the fence and
// the row's (holder, epoch): last_error and its database time, failures
// counting failed starts in a row and reset by a run that had lasted;
// restarts counts the starts after the first; a stored error is valid
// UTF-8 without NUL, cut to its bound; and Migrate adds the three columns
// to a table of an earlier version.
func testSingletonFailures(t *testing.T, s *sqlstore.Store) {
	ctx := context.Background()
	const name = "crashy"
	if err := s.EnsureSingleton(ctx, name); err != nil {
		t.Fatal(err)
	}
	a := mustAcquire(t, s, "singleton:"+name, "a", time.Minute).Token()
	fenced := func(tok sqlease.Token, fn func(tx *sql.Tx) error) {
		t.Helper()
		if err := s.Fenced(ctx, tok, fn); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		fenced(a, func(tx *sql.Tx) error { return s.StartSingleton(ctx, tx, name, a) })
		fenced(a, func(tx *sql.Tx) error {
			return s.FailSingleton(ctx, tx, name, a, "exit status 127: sh: nope: not found", true)
		})
		r, err := s.Singleton(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r.Failures != int64(i+1) || r.Restarts != int64(i) || r.LastError != "exit status 127: sh: nope: not found" ||
			r.LastErrorAt.Before(r.StartedAt) || r.Now.Before(r.LastErrorAt) {
			t.Fatalf("after failed start %d: %+v", i+1, r)
		}
		checkSaneTime(t, "last_error_at", r.LastErrorAt, time.Now())
	}
	// A run that had lasted ends: the failed starts in a row are over.
	fenced(a, func(tx *sql.Tx) error { return s.StartSingleton(ctx, tx, name, a) })
	long := strings.Repeat("é", sqlstore.MaxSingletonError) + "\x00\xff"
	fenced(a, func(tx *sql.Tx) error { return s.FailSingleton(ctx, tx, name, a, long, false) })
	r, err := s.Singleton(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if r.Failures != 0 || r.Restarts != 3 || len(r.LastError) > sqlstore.MaxSingletonError || !utf8.ValidString(r.LastError) ||
		strings.ContainsRune(r.LastError, 0) || !strings.HasPrefix(r.LastError, "éé") {
		t.Fatalf("after a run that lasted: failures %d, restarts %d, last_error of %d bytes (%.20q…)", r.Failures, r.Restarts, len(r.LastError), r.LastError)
	}
	// Another holder's term: a's record is refused, inside b's fence too.
	if err := s.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	b := mustAcquire(t, s, "singleton:"+name, "b", time.Minute).Token()
	fenced(b, func(tx *sql.Tx) error { return s.StartSingleton(ctx, tx, name, b) })
	if err := s.Fenced(ctx, b, func(tx *sql.Tx) error { return s.FailSingleton(ctx, tx, name, a, "late", true) }); !errors.Is(err, sqlease.ErrLeaseLost) {
		t.Fatalf("a's record inside b's fence: %v, want ErrLeaseLost", err)
	}
	if r, _ := s.Singleton(ctx, name); r.LastError == "late" || r.Restarts != 4 || r.Holder != "b" {
		t.Fatalf("after a's refused record: %+v", r)
	}

	// A table of an earlier version lacks the columns: Migrate adds them.
	if s.Dialect().Name == "sqlserver" {
		return // dropping failures needs its default's constraint dropped first
	}
	for _, c := range s.Dialect().Singletons.Columns {
		if _, err := s.DB().ExecContext(ctx, "ALTER TABLE "+c.Table+" DROP COLUMN "+c.Name); err != nil {
			t.Fatalf("drop %s: %v", c.Name, err)
		}
	}
	if _, err := s.Singleton(ctx, name); err == nil {
		t.Fatal("read the row without its columns")
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	r, err = s.Singleton(ctx, name)
	if err != nil || r.Failures != 0 || r.LastError != "" || !r.LastErrorAt.IsZero() || r.Holder != "b" {
		t.Fatalf("after the upgrade: %+v %v", r, err)
	}
}
