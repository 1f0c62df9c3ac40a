package failover

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlease/sqlease/internal/pgtest"
)

// How idle cost is counted.
//
// The total is pg_stat_database's xact_commit + xact_rollback of the node
// database: every transaction the server ran for the nodes, including
// connection start-up and pgx's "-- ping" (database/sql's ResetSession sends
// one before reusing a pooled connection idle for more than a second; both
// count as a transaction). Backends report these counters late — up to
// PGSTAT_IDLE_INTERVAL (10 s) after an idle backend's last transaction — so
// the window starts only after idleSettle, and it is long; in a steady state
// the lag is the same at both ends.
//
// The breakdown is exact: the node database runs with log_statement = 'all'
// (ALTER DATABASE, so only the nodes' sessions log) into a CSV log, and the
// statements logged inside the window are counted by kind, pings included
// (each attributed to the statement that followed it on the same backend).
// The counters are read over a connection to another database ("postgres"),
// so the measurement's own queries are in neither count.

// idleSettle lets start-up transactions reach pg_stat_database before the
// idle window opens.
const idleSettle = 12 * time.Second

// statsServer starts a private PostgreSQL server for idle-cost measurement:
// autovacuum off (its workers' transactions would count in the node
// database) and a CSV log (logging collector) at a known path, which it
// returns.
func statsServer(t *testing.T) (*pgtest.Server, string) {
	t.Helper()
	srv := pgtest.Start(t)
	ctx, cancel := ctxT(30 * time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	var dataDir string
	if err := conn.QueryRow(ctx, `SELECT current_setting('data_directory')`).Scan(&dataDir); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		`ALTER SYSTEM SET autovacuum = off`,
		`ALTER SYSTEM SET logging_collector = on`,
		`ALTER SYSTEM SET log_destination = 'csvlog'`,
		`ALTER SYSTEM SET log_directory = 'log'`,
		`ALTER SYSTEM SET log_filename = 'pg.log'`,
		`ALTER SYSTEM SET log_rotation_age = 0`,
		`ALTER SYSTEM SET log_rotation_size = 0`,
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	conn.Close(ctx)
	srv.Restart(t)
	return srv, filepath.Join(dataDir, "log", "pg.csv")
}

// logged is one statement from the CSV log.
type logged struct {
	at   time.Time
	pid  string
	app  string
	text string // the SQL, or "-- ping"
}

// readStatements returns the statements the server logged for dbname.
func readStatements(path, dbname string) ([]logged, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	r.LazyQuotes = true
	var out []logged
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		// log_time, user, database, pid, …, message (13), …, application_name (22)
		if len(rec) < 23 || rec[2] != dbname {
			continue
		}
		msg := rec[13]
		var text string
		switch {
		case strings.HasPrefix(msg, "statement: "):
			text = strings.TrimPrefix(msg, "statement: ")
		case strings.HasPrefix(msg, "execute "):
			_, text, _ = strings.Cut(msg, ": ")
		default:
			continue
		}
		at, err := time.Parse("2006-01-02 15:04:05.000 MST", rec[0])
		if err != nil {
			return nil, fmt.Errorf("log time %q: %v", rec[0], err)
		}
		out = append(out, logged{at: at, pid: rec[3], app: rec[22], text: strings.TrimSpace(text)})
	}
}

// kind names what a statement of the nodes is for.
func kind(q string) string {
	s := strings.Join(strings.Fields(q), " ")
	u := strings.ToUpper(s)
	switch {
	case s == "-- ping":
		return "pgx pool ping"
	case u == "BEGIN" || strings.HasPrefix(u, "BEGIN ") || u == "COMMIT" || u == "ROLLBACK" || strings.HasPrefix(u, "SET "):
		return "transaction control"
	case strings.Contains(s, "sqlease.migrate"):
		return "start-up: migration lock"
	case strings.Contains(s, "pg_advisory_lock("):
		return "follower: pg_advisory_lock (blocks until the lock is free)"
	case strings.Contains(s, "pg_advisory_unlock("):
		return "pg_advisory_unlock"
	case strings.HasPrefix(u, "UPDATE") && strings.Contains(s, "_leases") && strings.Contains(s, "renewed_at"):
		return "leader: renew"
	case (strings.HasPrefix(u, "INSERT") || strings.HasPrefix(u, "WITH")) && strings.Contains(s, "_leases"):
		return "acquire / takeover"
	case strings.HasPrefix(u, "SELECT") && strings.Contains(s, "_leases WHERE lease_name"):
		return "follower: read lease row (lease: poll; advisory: observe)"
	case strings.HasPrefix(u, "SELECT EXISTS") && strings.Contains(s, "pg_locks"):
		return "advisory: lock-held check"
	case strings.Contains(s, "_jobs") && strings.Contains(s, "last_modified_at >"):
		return "leader: schedule refresh (Changed)"
	case strings.Contains(s, "_jobs") && strings.Contains(s, "ORDER BY j.next_run_at"):
		return "leader: schedule reload (DueWindow)"
	case strings.HasPrefix(u, "DELETE") && strings.Contains(s, "_runs"):
		return "leader: prune runs"
	case strings.Contains(s, "_singletons"):
		return "singletons: definitions and state"
	}
	if len(s) > 70 {
		s = s[:70] + "…"
	}
	return "other: " + s
}

// idleCost is what an idle fleet costs its database, per second.
type idleCost struct {
	label  string
	window time.Duration
	xacts  float64            // transactions/s (pg_stat_database)
	stmts  float64            // statements/s logged, pings included
	byKind map[string]float64 // statements/s by kind
}

// idleServer starts an idle-cost test: it skips under -short, runs in
// parallel — each such test counts the statements of its own private
// server, which waiting for a CPU does not change, while the latency bounds
// of the handoff tests, which it would, run before (sequential tests
// first) — and returns its statistics server.
func idleServer(t *testing.T) (*pgtest.Server, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts PostgreSQL and sqlease processes")
	}
	t.Parallel()
	return statsServer(t)
}

// followers returns the statements/s of the followers' kinds.
func (c idleCost) followers() float64 {
	var sum float64
	for k, v := range c.byKind {
		if strings.Contains(k, "follower") {
			sum += v
		}
	}
	return sum
}

// measureIdle runs three idle nodes (no jobs) on a fresh database of the
// server and counts what they cost over window, after settle.
func measureIdle(t *testing.T, srv, csvPath, label, mode string, settle, window time.Duration, args ...string) idleCost {
	t.Helper()
	return measureIdleWith(t, srv, csvPath, label, mode, settle, window, idleSetup{}, args...)
}

// idleSetup prepares an idle measurement: before runs on the migrated
// database before the nodes start, ready once they serve, before the settle
// time (e.g. to wait until singletons are balanced).
type idleSetup struct {
	before func(db string)
	ready  func(*cluster)
}

// measureIdleWith is measureIdle with setup.
func measureIdleWith(t *testing.T, srv, csvPath, label, mode string, settle, window time.Duration, setup idleSetup, args ...string) idleCost {
	t.Helper()
	db := pgtest.CreateDatabase(t, srv)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	dbname := strings.TrimPrefix(u.Path, "/")
	ctx, cancel := ctxT(settle + window + time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, srv)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{dbname}.Sanitize()+` SET log_statement = 'all'`); err != nil {
		t.Fatal(err)
	}

	if setup.before != nil {
		setup.before(db)
	}
	c := newCluster(t, db, mode, args...)
	for range 3 {
		c.launch()
	}
	waitAnyLeader(t, c, 30*time.Second)
	if setup.ready != nil {
		setup.ready(c)
	}
	time.Sleep(settle)

	xacts := func() (time.Time, int64) {
		var n int64
		if err := admin.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, dbname).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return time.Now(), n
	}
	t1, x1 := xacts()
	time.Sleep(window)
	t2, x2 := xacts()
	for _, n := range c.running() {
		n.signal(syscall.SIGTERM)
	}
	for _, n := range c.all() {
		n.waitExit(15 * time.Second)
	}

	secs := t2.Sub(t1).Seconds()
	res := idleCost{label: label, window: t2.Sub(t1), xacts: float64(x2-x1) / secs, byKind: map[string]float64{}}
	// The log may lag its writer by a moment.
	time.Sleep(200 * time.Millisecond)
	stmts, err := readStatements(csvPath, dbname)
	if err != nil {
		t.Fatalf("reading the server log %s: %v", csvPath, err)
	}
	pinged := map[string]bool{} // backends whose last statement was a ping
	for _, s := range stmts {
		if s.at.Before(t1.Truncate(time.Millisecond)) || !s.at.Before(t2) {
			continue
		}
		k := kind(s.text)
		if k == "pgx pool ping" {
			res.stmts += 1 / secs
			pinged[s.pid] = true
			continue
		}
		if pinged[s.pid] {
			res.byKind["pgx pool ping before "+k] += 1 / secs
			delete(pinged, s.pid)
		}
		res.byKind[k] += 1 / secs
		res.stmts += 1 / secs
	}
	for range pinged { // a ping at the window's end
		res.byKind["pgx pool ping (next statement after the window)"] += 1 / secs
	}
	return res
}

func waitAnyLeader(t *testing.T, c *cluster, timeout time.Duration) *node {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, n := range c.running() {
			if _, err := n.waitLog(10*time.Millisecond, "leader_acquired", func(l logLine) bool { return l.Msg == "leader_acquired" }); err == nil {
				return n
			}
		}
	}
	t.Fatalf("no leader within %v", timeout)
	return nil
}

// idleTable renders idle costs: one row per configuration, then the
// breakdown by kind.
func idleTable(res []idleCost) string {
	var rows [][]string
	for _, r := range res {
		rows = append(rows, []string{r.label, fmt.Sprintf("%.0fs", r.window.Seconds()), fmt.Sprintf("%.2f", r.xacts), fmt.Sprintf("%.2f", r.stmts)})
	}
	out := table([]string{"3 idle nodes", "window", "transactions/s (pg_stat_database)", "statements/s (server log, pings included)"}, rows)
	for _, r := range res {
		kinds := make([]string, 0, len(r.byKind))
		for k := range r.byKind {
			kinds = append(kinds, k)
		}
		sort.Slice(kinds, func(i, j int) bool {
			if r.byKind[kinds[i]] != r.byKind[kinds[j]] {
				return r.byKind[kinds[i]] > r.byKind[kinds[j]]
			}
			return kinds[i] < kinds[j]
		})
		var kr [][]string
		for _, k := range kinds {
			kr = append(kr, []string{k, fmt.Sprintf("%.2f", r.byKind[k])})
		}
		out += "\n" + r.label + ":\n" + table([]string{"statement kind", "per second"}, kr)
	}
	return out
}
