package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/mysql"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/singleton"
	"github.com/sqlease/sqlease/sqlstore"
)

// The singletons scenario (issue 32): the database load of idle
// singletons, and whether their holders keep every term. K library nodes
// (singleton.NewNode, election defaults: lease 6 s, renew 2 s, acquire 1
// s), each with a pool of its own as separate processes would have and, on
// PostgreSQL, the lease change feed the daemon uses, all register the same
// N singletons whose bodies only wait. Once every singleton runs and the
// fleet is balanced (no node above its fair share), statements are counted
// over a window: by the server (pg_stat_statements calls in the target
// database, utility statements such as BEGIN included) on PostgreSQL, its
// global Questions on MariaDB, and
// client-side (a database/sql connector wrapper: statements plus BEGIN,
// COMMIT and ROLLBACK) on every dialect. A lost term is a body stopped
// (OnStopped) during the window: in an idle fleet, a renewal that fell
// behind.

type singletonOpts struct {
	dialect  string
	n, nodes int
	advisory bool
	window   time.Duration
	settle   time.Duration
}

type singletonRun struct {
	settleTook   time.Duration
	serverStmts  float64 // per second; <0 when unknown
	clientStmts  float64 // per second
	lostTerms    int64
	running      int
	perNode      []int
	topStatement string
	// After the window, node 0 stopped dead (its pool closed, its sessions
	// terminated on PostgreSQL, no release): how many it held, the time
	// until all of them ran on the other nodes, and the terms the other
	// nodes lost (bodies stopped) within 3 renew intervals after that.
	deadHeld      int
	failover      time.Duration
	lostAfterMove int64
	// freedToLast, on PostgreSQL: from pg_terminate_backend's return for
	// node 0's sessions (the server then frees their advisory locks within
	// milliseconds) to the last of its singletons' bodies entered on another
	// node — the time the advisory target is about, without the
	// bench's 10 ms polling.
	freedToLast time.Duration
}

func singletonScenario(ctx context.Context, e *env, o singletonOpts, runs int) bool {
	mode := "lease"
	if o.advisory {
		mode = "advisory"
	}
	fmt.Printf("\n== idle singletons — %s, %s mode, %d singletons on %d node(s), window %s\n", o.dialect, mode, o.n, o.nodes, o.window)
	var server, client, lost, fo, freed, after []float64
	if !rounds(ctx, e, runs, func() (singletonRun, error) { return runSingletons(ctx, e, o) }, func(i int, bg float64, r singletonRun) {
		srv := "n/a"
		if r.serverStmts >= 0 {
			srv = fmt.Sprintf("%.1f", r.serverStmts)
			server = append(server, r.serverStmts)
		}
		cl := "n/a (MariaDB: counted by the server only)"
		if o.dialect != "mysql" {
			cl = fmt.Sprintf("%.1f", r.clientStmts)
			client = append(client, r.clientStmts)
		}
		lost = append(lost, float64(r.lostTerms))
		fmt.Printf("  run %d [bg %.0f%%]: settled in %s (%d running, per node %v); statements/s: server %s, client %s; terms lost in the window: %d; most frequent: %s\n",
			i, bg*100, r.settleTook.Round(time.Millisecond), r.running, r.perNode, srv, cl, r.lostTerms, r.topStatement)
		if r.deadHeld > 0 {
			fo = append(fo, float64(r.failover))
			after = append(after, float64(r.lostAfterMove))
			if r.freedToLast != 0 {
				freed = append(freed, float64(r.freedToLast))
			}
			ended := ""
			if r.freedToLast != 0 {
				ended = fmt.Sprintf(" (its sessions ended → last body entered: %s)", fmtDur(r.freedToLast))
			}
			fmt.Printf("    node 0 stopped dead holding %d: all on live nodes %s later%s; terms the others lost in the next 3 renew intervals: %d\n",
				r.deadHeld, fmtDur(r.failover), ended, r.lostAfterMove)
		}
	}) {
		return false
	}
	if len(lost) == 0 {
		return true
	}
	line := "  median:"
	if len(client) > 0 {
		line += fmt.Sprintf(" client %.1f statements/s (%.2f per singleton)", medianOf(client), medianOf(client)/float64(o.n))
	}
	if len(server) > 0 {
		line += fmt.Sprintf(" server %.1f statements/s (%.2f per singleton)", medianOf(server), medianOf(server)/float64(o.n))
	}
	line += fmt.Sprintf(", terms lost %.0f", medianOf(lost))
	if len(fo) > 0 {
		line += fmt.Sprintf(", failover of a dead node's singletons %s", fmtDur(time.Duration(medianOf(fo))))
		if len(freed) > 0 {
			line += fmt.Sprintf(" (its sessions ended → last body entered %s)", fmtDur(time.Duration(medianOf(freed))))
		}
		line += fmt.Sprintf(", terms lost after it %.0f", medianOf(after))
	}
	fmt.Println(line)
	return true
}

func runSingletons(ctx context.Context, e *env, o singletonOpts) (res singletonRun, err error) {
	res.serverStmts = -1
	t, err := e.newTarget(ctx, o.dialect)
	if err != nil {
		return res, err
	}
	defer t.cleanup()
	tr := newTracer()
	stores := make([]*sqlstore.Store, o.nodes)
	for i := range stores {
		if stores[i], err = t.open(tr); err != nil {
			return res, err
		}
		defer stores[i].DB().Close()
	}
	if err := t.migrate(ctx, stores[0]); err != nil {
		return res, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var feed *postgres.LeaseFeed
	if o.dialect == "postgres" {
		if feed, err = postgres.ListenLeaseFeed(runCtx, t.dsn, prefix, slog.New(slog.DiscardHandler)); err != nil {
			return res, err
		}
	}
	var inWindow, deadNow atomic.Bool
	var bodyStarted sync.Map // name → time.Time: a body's last entry on a node other than 0 after node 0 died
	var lostTerms atomic.Int64
	nodes := make([]*singleton.Node, o.nodes)
	for i := range nodes {
		cfg := singleton.NodeConfig{Store: stores[i], HolderID: fmt.Sprintf("bench-%d", i)}
		node := i
		if feed != nil {
			cfg.Changes = feed.Subscribe
		}
		if o.advisory {
			if o.dialect != "postgres" {
				return res, fmt.Errorf("advisory mode: PostgreSQL only in this bench")
			}
			// Named, so that its sessions can be ended as a kill -9 would.
			dsn, err := appName(t.dsn, fmt.Sprintf("bench-%d", i))
			if err != nil {
				return res, err
			}
			if cfg.SessionLocker, err = postgres.NewLocker(postgres.AdvisoryConfig{DSN: dsn, Prefix: prefix}); err != nil {
				return res, err
			}
		}
		if nodes[i], err = singleton.NewNode(cfg); err != nil {
			return res, err
		}
		for k := range o.n {
			if err := singleton.Register(nodes[i], singleton.Config[struct{}]{
				Name:              fmt.Sprintf("idle-%05d", k),
				HeartbeatInterval: time.Hour,
				StopTimeout:       time.Second,
				Body: func(ctx context.Context, in *singleton.Instance[struct{}]) error {
					if node != 0 && deadNow.Load() {
						bodyStarted.Store(in.Token().Name, time.Now())
					}
					<-ctx.Done()
					return nil
				},
				OnStopped: func(sqlease.Token) {
					if inWindow.Load() && (node != 0 || !deadNow.Load()) {
						lostTerms.Add(1)
					}
				},
			}); err != nil {
				return res, err
			}
		}
	}
	var wg sync.WaitGroup
	cancels := make([]context.CancelFunc, len(nodes))
	for i, n := range nodes {
		nctx, ncancel := context.WithCancel(runCtx)
		cancels[i] = ncancel
		wg.Add(1)
		go func() { defer wg.Done(); _ = n.Run(nctx) }()
	}
	defer func() { cancel(); wg.Wait() }()

	// Settled: every singleton runs on exactly one node, none above the
	// fair share.
	start := time.Now()
	share := (o.n + o.nodes - 1) / o.nodes
	for {
		running, per := 0, make([]int, len(nodes))
		for i, n := range nodes {
			for _, st := range n.Status() {
				if st.Running {
					per[i]++
				}
			}
			running += per[i]
		}
		res.running, res.perNode = running, per
		balanced := running == o.n
		for _, k := range per {
			balanced = balanced && k <= share
		}
		if balanced {
			break
		}
		if time.Since(start) > o.settle {
			return res, fmt.Errorf("not settled within %s: %d of %d running, per node %v", o.settle, running, o.n, per)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	res.settleTook = time.Since(start)

	// The window.
	srv0, srvOK := e.serverCalls(ctx, t)
	cl0 := tr.snapshot()
	inWindow.Store(true)
	w0 := time.Now()
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(o.window):
	}
	inWindow.Store(false)
	took := time.Since(w0).Seconds()
	cl1 := tr.snapshot()
	srv1, srvOK1 := e.serverCalls(ctx, t)
	if srvOK && srvOK1 {
		res.serverStmts = float64(srv1-srv0) / took
	}
	var calls int64
	top, topCalls := "", int64(0)
	for q, s := range cl1.Stmts {
		d := s.Calls - cl0.Stmts[q].Calls
		calls += d
		if d > topCalls {
			top, topCalls = q, d
		}
	}
	calls += (cl1.Begins - cl0.Begins) + (cl1.Commits - cl0.Commits) + (cl1.Rollbacks - cl0.Rollbacks)
	res.clientStmts = float64(calls) / took
	res.lostTerms = lostTerms.Load()
	if top != "" {
		res.topStatement = fmt.Sprintf("%.1f/s %s", float64(topCalls)/took, shortSQL(top))
	}
	if len(nodes) < 2 {
		return res, nil
	}

	// Node 0 stopped dead: its pool closed first (no statement, no
	// release gets out), then on PostgreSQL its sessions ended — the
	// advisory ones, which the database then frees as after a kill -9 —
	// and its Run cancelled before it can open new ones.
	var dead []string
	for _, st := range nodes[0].Status() {
		if st.Running {
			dead = append(dead, st.Name)
		}
	}
	res.deadHeld = len(dead)
	deadNow.Store(true)
	stores[0].DB().Close()
	t0 := time.Now()
	var freed time.Time
	if o.dialect == "postgres" {
		if _, err := stores[1].DB().ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'bench-0'`); err != nil {
			return res, fmt.Errorf("end node 0's sessions: %w", err)
		}
		freed = time.Now()
	}
	cancels[0]()
	for {
		moved := 0
		runs := map[string]bool{}
		for _, n := range nodes[1:] {
			for _, st := range n.Status() {
				if st.Running {
					runs[st.Name] = true
				}
			}
		}
		for _, name := range dead {
			if runs[name] {
				moved++
			}
		}
		if moved == len(dead) {
			break
		}
		if time.Since(t0) > 2*time.Minute {
			return res, fmt.Errorf("after node 0 stopped dead: %d of its %d run elsewhere after 2m", moved, len(dead))
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	res.failover = time.Since(t0)
	if !freed.IsZero() {
		var last time.Time
		for _, name := range dead {
			if v, ok := bodyStarted.Load(singleton.LeasePrefix + name); ok && v.(time.Time).After(last) {
				last = v.(time.Time)
			}
		}
		res.freedToLast = last.Sub(freed)
	}
	lostTerms.Store(0)
	inWindow.Store(true)
	time.Sleep(3 * 2 * time.Second) // 3 renew intervals (election defaults)
	inWindow.Store(false)
	res.lostAfterMove = lostTerms.Load()
	return res, nil
}

// appName returns the PostgreSQL URL dsn with application_name set.
func appName(dsn, name string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// serverCalls is the number of statements the server has counted so far:
// on PostgreSQL pg_stat_statements' calls in the target's database (false
// when it is not loaded); on MariaDB the global Questions (the bench's
// private server serves nothing else; this read itself counts 1).
func (e *env) serverCalls(ctx context.Context, t *target) (int64, bool) {
	if t.dialect == "mysql" {
		db, err := mysql.Open(e.mysqlURL)
		if err != nil {
			return 0, false
		}
		defer db.Close()
		var name string
		var n int64
		if err := db.QueryRowContext(ctx, `SHOW GLOBAL STATUS LIKE 'Questions'`).Scan(&name, &n); err != nil {
			return 0, false
		}
		return n, true
	}
	if t.dialect != "postgres" || !e.pgss {
		return 0, false
	}
	conn, err := pgx.Connect(ctx, e.pgURL)
	if err != nil {
		return 0, false
	}
	defer conn.Close(context.Background())
	var n int64
	if err := conn.QueryRow(ctx, `SELECT COALESCE(sum(calls), 0)::bigint FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)`, t.dbName).Scan(&n); err != nil {
		return 0, false
	}
	return n, true
}

func shortSQL(q string) string {
	s := strings.Join(strings.Fields(q), " ")
	if len(s) > 70 {
		s = s[:67] + "..."
	}
	return s
}
