package mysql_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/mysql"
	"github.com/sqlease/sqlease/sqlstore"
	"github.com/sqlease/sqlease/storetest"
)

// TestAdvisory runs the advisory-mode scenarios every dialect shares
// (storetest.Advisory) on GET_LOCK sessions.
func TestAdvisory(t *testing.T) {
	storetest.Advisory(t, storetest.AdvisoryDialect{
		New:                 database.Advisory(newLocker),
		KillHolder:          killHolder,
		InterruptedLockLost: true,
		Parallel:            true,
	})
}

// newLocker makes the GET_LOCK session locker of the tables under prefix.
func newLocker(url, prefix string) (sqlease.SessionLocker, error) {
	return mysql.NewLocker(mysql.AdvisoryConfig{DSN: url, Prefix: prefix})
}

// killHolder ends the server session that holds the lock of lease from a
// third connection (KILL), as the server does when it sees a client die.
func killHolder(t *testing.T, s *sqlstore.Store, prefix, lease string) {
	t.Helper()
	lockName := mysql.LockName(prefix, lease)
	var id sql.NullInt64
	if err := s.DB().QueryRowContext(t.Context(), `SELECT IS_USED_LOCK(?)`, lockName).Scan(&id); err != nil || !id.Valid {
		t.Fatalf("find the holder of %s: %v %v", lockName, id, err)
	}
	if _, err := s.DB().ExecContext(t.Context(), `KILL ?`, id.Int64); err != nil {
		t.Fatalf("KILL %d: %v", id.Int64, err)
	}
}

func TestLockName(t *testing.T) {
	if got := mysql.LockName("sqlease", "leader"); got != "sqlease:sqlease:leader" {
		t.Fatalf("LockName: %q", got)
	}
	long := mysql.LockName("sqlease", strings.Repeat("x", 100))
	upper := mysql.LockName("sqlease", "Leader")
	for _, n := range []string{long, upper} {
		if len(n) != 64 || !strings.HasPrefix(n, "sqlease:") || strings.Count(n, ":") != 1 {
			t.Fatalf("hashed lock name %q: want sqlease: and 56 hex digits", n)
		}
	}
	// Lock names are case insensitive, lease names are not.
	if upper == mysql.LockName("sqlease", "leader") || upper != mysql.LockName("sqlease", "Leader") {
		t.Fatal("lock names must be stable and tell leases apart by case")
	}
	if long == mysql.LockName("sqlease", strings.Repeat("x", 101)) {
		t.Fatal("long lease names must get distinct lock names")
	}
}

func TestAdvisoryBadConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  mysql.AdvisoryConfig
		want error
	}{
		{mysql.AdvisoryConfig{DSN: "mysql://u:p@127.0.0.1/db", Prefix: "Bad-Prefix"}, sqlease.ErrInvalidName},
		{mysql.AdvisoryConfig{DSN: "", Prefix: "sqlease"}, sqlease.ErrInvalidConfig},
		{mysql.AdvisoryConfig{DSN: "postgres://u:secret@127.0.0.1/db", Prefix: "sqlease"}, sqlease.ErrInvalidConfig},
		{mysql.AdvisoryConfig{DSN: "mysql://u:secret@127.0.0.1/db?parseTime=false", Prefix: "sqlease"}, sqlease.ErrInvalidConfig},
		{mysql.AdvisoryConfig{DSN: "mysql://u:p@127.0.0.1/db", Prefix: "sqlease", Key: strings.Repeat("k", 65)}, sqlease.ErrInvalidConfig},
	} {
		_, err := mysql.NewLocker(c.cfg)
		if !errors.Is(err, c.want) {
			t.Errorf("NewLocker(%+v): want %v, got %v", c.cfg, c.want, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("error shows the password: %v", err)
		}
	}
	l, err := mysql.NewLocker(mysql.AdvisoryConfig{DSN: "mysql://u:p@127.0.0.1/db", Prefix: "sqlease"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l(t.Context(), "bad name"); !errors.Is(err, sqlease.ErrInvalidName) {
		t.Fatalf("session for a bad lease name: want ErrInvalidName, got %v", err)
	}
}

// A holder that goes silent for a whole lease has its session ended by the
// server (wait_timeout, set by Takeover): its lock is freed.
func TestAdvisorySilentHolderEnded(t *testing.T) {
	t.Parallel()
	_, locker, _ := database.Advisory(newLocker)(t)
	a, b := storetest.OpenSession(t, locker, "adv"), storetest.OpenSession(t, locker, "adv")
	if err := a.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Takeover(t.Context(), "adv", "holder-a", 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	silent := time.Now()
	done := make(chan error, 1)
	go func() { done <- b.Lock(t.Context()) }()
	select {
	case <-a.Lost():
		t.Logf("the server ended the silent holder's session after %s", time.Since(silent))
	case <-time.After(5 * time.Second):
		t.Fatal("the silent holder's session was not ended")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Lock did not return within 1s")
	}
}
