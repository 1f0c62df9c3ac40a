package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlease/sqlease"
)

// A session that lost its lock behind the elector's back — what a
// transaction-mode pooler does, handing statements to other backends — is
// refused at its next renew with ErrSessionLost.
func TestAdvisoryRenewDetectsLostLock(t *testing.T) {
	ctx := t.Context()
	b := make([]byte, 6)
	rand.Read(b)
	prefix := "t" + hex.EncodeToString(b)
	sess, url := testSession(t, prefix, "adv")
	s, err := OpenStore(ctx, url, prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		s.DB().Exec(`DROP TABLE ` + prefix + `_leases, ` + prefix + `_jobs, ` + prefix + `_runs`)
		s.DB().Close()
	}()
	if err := sess.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err := sess.Takeover(ctx, "adv", "holder-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.do(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Renew(ctx, lease.Token(), time.Minute); !errors.Is(err, sqlease.ErrSessionLost) {
		t.Fatalf("renew after the session lost its lock: want ErrSessionLost, got %v", err)
	}
	// The lease row is untouched by the refused renew.
	got, err := s.Lease(ctx, "adv")
	if err != nil || !got.RenewedAt.Equal(lease.RenewedAt) {
		t.Fatalf("lease after the refused renew: %+v %v", got, err)
	}
}

// testSession opens an advisory session on lease for the tables under
// prefix on the test server (skipping without one), closed when t ends. It
// returns the session and the server's URL.
func testSession(t *testing.T, prefix, lease string) (*session, string) {
	t.Helper()
	url := os.Getenv("SQLEASE_TEST_POSTGRES_URL")
	if url == "" {
		t.Skip("SQLEASE_TEST_POSTGRES_URL is not set: run scripts/test.sh")
	}
	locker, err := NewLocker(AdvisoryConfig{DSN: url, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	l, err := locker(t.Context(), lease)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l.(*session), url
}
