package fleettest

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// TerminateBackends ends every session on db's database except the one it
// uses itself — on PostgreSQL with pg_terminate_backend, on MySQL/MariaDB
// with KILL CONNECTION — and returns how many it ended. Give each test a
// database of its own (pgtest.CreateDatabase, mysqltest.CreateDatabase):
// the sessions of a test's nodes are then exactly the database's.
func TerminateBackends(ctx context.Context, db *sql.DB, dialect string) (int, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	switch dialect {
	case "postgres":
		var n int
		err := conn.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n)
		return n, err
	case "mysql":
		rows, err := conn.QueryContext(ctx, `SELECT ID FROM information_schema.PROCESSLIST
WHERE DB = DATABASE() AND ID <> CONNECTION_ID()`)
		if err != nil {
			return 0, err
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return 0, err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, err
		}
		n := 0
		for _, id := range ids {
			// A session may end by itself meanwhile (unknown thread id).
			if _, err := conn.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err == nil {
				n++
			}
		}
		return n, nil
	}
	return 0, fmt.Errorf("fleettest: TerminateBackends: unknown dialect %q", dialect)
}

// BlockJobs takes a lock on table (the jobs table) that makes every reader
// wait — ACCESS EXCLUSIVE on PostgreSQL, LOCK TABLES … WRITE on
// MySQL/MariaDB — and holds it until release is called. Blocked reports
// whether a session of another connection now waits for it. Use it to hold
// a schedule load in flight until a fault hits it.
func BlockJobs(ctx context.Context, db *sql.DB, dialect, table string) (blocked func(context.Context) (bool, error), release func(), err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	var unlock string
	switch dialect {
	case "postgres":
		_, err = conn.ExecContext(ctx, `BEGIN; LOCK TABLE `+table+` IN ACCESS EXCLUSIVE MODE`)
		unlock = `ROLLBACK`
		blocked = func(ctx context.Context) (bool, error) {
			var n int
			err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND query ILIKE '%`+table+`%'`).Scan(&n)
			return n > 0, err
		}
	case "mysql":
		_, err = conn.ExecContext(ctx, `LOCK TABLES `+table+` WRITE`)
		unlock = `UNLOCK TABLES`
		blocked = func(ctx context.Context) (bool, error) {
			var n int
			err := db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.PROCESSLIST
WHERE DB = DATABASE() AND STATE LIKE '%metadata lock%' AND INFO LIKE '%`+table+`%'`).Scan(&n)
			return n > 0, err
		}
	default:
		err = fmt.Errorf("fleettest: BlockJobs: unknown dialect %q", dialect)
	}
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	release = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = conn.ExecContext(ctx, unlock)
		conn.Close()
	}
	return blocked, release, nil
}

// Proxy is an in-process TCP proxy (toxiproxy) in front of a database:
// point the nodes at Addr and Cut every connection through it.
type Proxy struct {
	p *toxiproxy.Proxy
}

// NewProxy starts a proxy to upstream (host:port) on a free 127.0.0.1 port;
// it is stopped when the test ends.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	for try := 0; ; try++ {
		p := toxiproxy.NewProxy(srv, "db", QuietAddr(t), upstream)
		err := p.Start()
		if err == nil {
			t.Cleanup(p.Stop)
			return &Proxy{p: p}
		}
		if try == 20 {
			t.Fatalf("fleettest: starting the proxy: %v", err)
		}
	}
}

// QuietAddr returns a free 127.0.0.1 address whose port lies below the
// kernel's ephemeral range: a proxy that stops and listens again on its
// address must find it free, and a port from that range (a listener on
// port 0) can meanwhile become the local end of any outgoing connection —
// seen once in CI: a restart failed for 5 s with "address already in use".
func QuietAddr(t testing.TB) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 2048 {
				low = n
			}
		}
	}
	for range 100 {
		addr := fmt.Sprintf("127.0.0.1:%d", 1024+rand.IntN(low-1024))
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr
		}
	}
	t.Fatalf("fleettest: no free port below %d", low)
	return ""
}

// Addr is the proxy's listening address (host:port).
func (x *Proxy) Addr() string { return x.p.Listen }

// Cut closes every connection through the proxy and refuses new ones for
// d, then accepts connections again on the same address.
func (x *Proxy) Cut(t testing.TB, d time.Duration) {
	t.Helper()
	x.Down()
	time.Sleep(d)
	x.Up(t)
}

// Down closes every connection through the proxy (both ends: the database
// sees its sessions end) and refuses new ones until Up.
func (x *Proxy) Down() { x.p.Stop() }

// Up accepts connections again on the proxy's address.
func (x *Proxy) Up(t testing.TB) {
	t.Helper()
	addr := x.p.Listen
	for deadline := time.Now().Add(5 * time.Second); ; {
		x.p.Listen = addr
		err := x.p.Start()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fleettest: restarting the proxy on %s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
