package fleettest

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqlease/sqlease/sqlite"
)

// SQLiteWriteLocked tries to take the write lock of db's SQLite file
// without waiting: true when another process (or connection) holds it.
func SQLiteWriteLocked(ctx context.Context, db *sql.DB) (bool, error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `PRAGMA busy_timeout = 0`); err != nil {
		return false, err
	}
	defer c.ExecContext(ctx, fmt.Sprintf(`PRAGMA busy_timeout = %d`, sqlite.DefaultBusyTimeout.Milliseconds()))
	if _, err := c.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		if strings.Contains(err.Error(), "SQLITE_BUSY") || strings.Contains(err.Error(), "database is locked") {
			return true, nil
		}
		return false, err
	}
	_, err = c.ExecContext(ctx, `ROLLBACK`)
	return false, err
}

// FreezeOutsideWrites SIGSTOPs the process pid where it holds no write lock
// of the SQLite file at path, and returns when. A process frozen inside one
// of its write transactions (a lease renewal, a claim, a save:
// milliseconds each) holds every other writer off until it wakes, which
// sqlease cannot change (README, SQLite); such a freeze is undone and tried
// again a moment later, so that a test tests what sqlease decides.
func FreezeOutsideWrites(t testing.TB, pid int, path string) time.Time {
	t.Helper()
	probe, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	for try := 1; ; try++ {
		at := time.Now()
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP %d: %v", pid, err)
		}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
			if st := ProcState(pid); st == "T" || st == "t" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("process %d not stopped 5s after SIGSTOP (state %q)", pid, ProcState(pid))
			}
		}
		locked, err := SQLiteWriteLocked(context.Background(), probe)
		if err != nil {
			t.Fatalf("probing the write lock: %v", err)
		}
		if !locked {
			if try > 1 {
				t.Logf("froze process %d outside a write transaction at try %d", pid, try)
			}
			return at
		}
		if try == 50 {
			t.Fatalf("process %d was inside a write transaction at each of %d freezes", pid, try)
		}
		_ = syscall.Kill(pid, syscall.SIGCONT)
		time.Sleep(time.Duration(5+rand.IntN(50)) * time.Millisecond)
	}
}
