package cli_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/cli"
	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/internal/syncbuf"
)

// TestServeWaitsForItsDatabase: a node started while its database refuses
// connections (a failover, a restart: here a proxy that refuses them)
// waits, saying so, and leads once the database answers; a database that
// refuses it for good (one that does not exist) ends the start at once.
func TestServeWaitsForItsDatabase(t *testing.T) {
	db := postgresURL(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	proxy := fleettest.NewProxy(t, u.Host)
	proxy.Down()
	u.Host = proxy.Addr()

	// serve starts a node on db; done yields its exit status, once.
	serve := func(db string) (log *syncbuf.Buffer, addr string, done chan int) {
		addr = freeAddr(t)
		ctx, cancel := context.WithCancel(context.Background())
		log, done = &syncbuf.Buffer{}, make(chan int, 1)
		exited := make(chan struct{})
		go func() {
			defer close(exited)
			done <- cli.Main(ctx, []string{"serve", "--db", db, "--http", addr, "--lease-duration", "2s", "--renew-interval", "300ms", "--acquire-interval", "100ms"},
				cli.Env{Stdin: strings.NewReader(""), Stdout: &syncbuf.Buffer{}, Stderr: log, Getenv: func(string) string { return "" }})
		}()
		t.Cleanup(func() {
			cancel()
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				t.Errorf("serve did not stop; log:\n%s", log.String())
			}
		})
		return log, addr, done
	}

	log, addr, done := serve(u.String())
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(log.String(), "database_unavailable"); time.Sleep(20 * time.Millisecond) {
		select {
		case code := <-done:
			t.Fatalf("serve exited (%d) while its database refused connections; log:\n%s", code, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no database_unavailable warning within 20 s; log:\n%s", log.String())
		}
	}
	time.Sleep(time.Second) // a few more refused attempts
	select {
	case code := <-done:
		t.Fatalf("serve exited (%d) while its database refused connections; log:\n%s", code, log.String())
	default:
	}
	proxy.Up(t)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if body, code := get(addr, "/readyz"); code == 200 && strings.HasPrefix(body, "mode=leader") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader within 30 s of the database answering; log:\n%s", log.String())
		}
	}

	missing := *u
	missing.Host, missing.Path = strings.Split(db, "/")[2], "/sqlease_no_such_database"
	mlog, _, mdone := serve(missing.String())
	select {
	case code := <-mdone:
		if code == 0 || !strings.Contains(mlog.String(), "sqlease_no_such_database") || strings.Contains(mlog.String(), "database_unavailable") {
			t.Errorf("serve on a database that does not exist: exit %d; log:\n%s", code, mlog.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("serve kept trying a database that does not exist; log:\n%s", mlog.String())
	}
}
