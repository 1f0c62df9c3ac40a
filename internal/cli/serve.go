package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/action"
	"github.com/sqlease/sqlease/dashboard"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/history"
	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/mysql"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/prom"
	"github.com/sqlease/sqlease/resilient"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/singleton"
	"github.com/sqlease/sqlease/sqlserver"
	"github.com/sqlease/sqlease/sqlstore"
)

// newLogger builds the node's logger from the log settings.
func newLogger(w io.Writer, format, level string) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lvl}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Node is one running sqlease serve: the elector, the scheduler and the HTTP
// API on one database.
type Node struct {
	cfg        Config
	log        *slog.Logger
	elector    *election.Elector
	sched      *scheduler.Scheduler
	singletons *singletonHost
	runs       *runHost          // the job actions running here, for their checkpoint calls
	worker     *election.Elector // claim mode: this worker's own lease
	repl       *replicationWatch // how durable a 2xx is
	// singletonChanges signals changed singleton definitions (PostgreSQL).
	singletonChanges <-chan struct{}
	store            *sqlstore.Store
	server           *http.Server
	listener         net.Listener
	stopping         atomic.Bool
	close            func()
	// readiness is the API's (httpapi.Readiness); version is shortVersion.
	readiness func() (bool, string)
	version   string
}

// NewNode opens the database (migrating it when configured), builds the
// elector and scheduler and binds the HTTP listener. It does not start them.
func NewNode(ctx context.Context, cfg Config, logOut io.Writer) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	trimmed, err := cfg.resolveToken()
	if err != nil {
		return nil, err
	}
	if err := action.SetExecUser(cfg.ExecUser); err != nil {
		return nil, usageError{err}
	}
	// A command can read its parent's environment and files: the node's
	// own secrets never show in a run's output nor a singleton's log lines.
	action.AddNodeSecrets(append(dsnSecrets(cfg.DB), cfg.APIToken)...)
	action.SnapshotNodeEnv() // its SQLEASE_SECRET_* values, read once as its flags' twins
	// HTTP actions of a node reachable beyond loopback do not reach its
	// loopback and link-local services (the cloud's metadata address).
	// The --http-action-allow list of exceptions goes in place of nil. Set
	// once the node is built (below): the policy is the process's.
	destinations, err := action.NewDestinationPolicy(cfg.HTTP, splitList(cfg.HTTPActionAllow))
	if err != nil {
		return nil, usageError{err}
	}
	log := newLogger(logOut, cfg.LogFormat, cfg.LogLevel)
	if trimmed {
		log.Warn("api_token_trimmed", slog.String("hint", "the API token had surrounding whitespace (a newline at the end of a secret file?); it was removed"))
	}
	// Bind first: a bad address must not create or migrate a database.
	ln, err := listen(cfg.HTTP)
	if err != nil {
		return nil, usagef("http: cannot listen on %s: %v", cfg.HTTP, err)
	}
	store, err := openStoreWaiting(ctx, log, startupWait, cfg.DB, cfg.TablePrefix, cfg.Migrate)
	if err != nil {
		ln.Close()
		return nil, err
	}
	if dialect, _, _ := dialectOf(cfg.DB); dialect == "mysql" {
		// A 2xx means durable (G6): say so when the server's own settings
		// (global, unlike PostgreSQL's synchronous_commit) break that.
		mysql.WarnWeakDurability(ctx, store.DB(), log)
	}
	// Background work owned by the node (the job change feed) lives until
	// the node closes.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	n := &Node{cfg: cfg, log: log, store: store, close: func() { stopBG(); store.DB().Close() }}
	// Until Run owns it, a failed construction must free the port too.
	built := false
	defer func() {
		if !built {
			ln.Close()
		}
	}()
	holder := cfg.HolderID
	if holder == "" {
		holder = election.DefaultHolderID()
	}
	var changes, leaseChanges, singletonChanges <-chan struct{}
	var leaseFeed *postgres.LeaseFeed
	if dialect, dsn, _ := dialectOf(cfg.DB); dialect == "postgres" {
		// The leader refreshes its schedule when jobs change instead of
		// polling every refresh interval; a claim-mode worker learns when
		// the next job falls due.
		if changes, err = postgres.ListenJobs(bg, dsn, cfg.TablePrefix, log); err != nil {
			n.close()
			return nil, err
		}
		// Followers look as soon as the leader releases or loses the lease;
		// the singletons' electors share the same connection.
		// Its connection is named after this node (the node's session:
		// the dashboards see at once when it is gone).
		if leaseFeed, err = postgres.ListenLeaseFeedAs(bg, dsn, cfg.TablePrefix, holder, log); err != nil {
			n.close()
			return nil, err
		}
		leaseChanges, _ = leaseFeed.Subscribe(cfg.LeaseName)
		if singletonChanges, err = postgres.ListenSingletons(bg, dsn, cfg.TablePrefix, log); err != nil {
			n.close()
			return nil, err
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	obs := prom.New(reg, cfg.LeaseName)

	// How durable a 2xx is: read now (the warning belongs to the start),
	// then every replicationEvery.
	dialect, _, _ := dialectOf(cfg.DB)
	n.repl = newReplicationWatch(dialect, store.DB(), log, cfg.RequireSyncReplication)
	n.repl.refresh(ctx, true)
	n.repl.register(reg)
	// leases wraps the lease store of every elector of the node: with
	// --require-synchronous-replication none acquires or renews while
	// replication is not synchronous.
	leases := func(s sqlease.LeaseStore) sqlease.LeaseStore {
		if cfg.RequireSyncReplication {
			return requireLeases{s, n.repl.check}
		}
		return s
	}

	// One decision on commands for every surface: the API's job, batch and
	// singleton routes, and what this node runs — a row another node or
	// the CLI wrote does not run here when this node refuses commands.
	execPolicy := cfg.execPolicy()
	// Each attempt of a job action gets its own secret for its checkpoint
	// calls (the node's API URL is set below, once it listens).
	n.runs = newRunHost()
	n.sched, err = scheduler.New(scheduler.Config{
		Store: store, Holder: holder, Handler: execPolicy.Handler(n.runs.Handler(action.Handle)), ValidateAction: action.ValidateJSON,
		PollInterval: cfg.PollInterval, RefreshInterval: cfg.RefreshInterval, Changes: changes, MaxConcurrent: cfg.MaxConcurrent,
		ShutdownTimeout: cfg.ShutdownTimeout, RunRetention: cfg.RunRetention, OutputLimit: outputLimit(cfg.RunOutputLimit),
		// Leading means dispatching: a leader whose schedule cannot be
		// built or refreshed for a lease duration resigns (Lead logs it).
		DispatchFailureLimit: cfg.LeaseDuration,
		Logger:               log, Observer: obs,
	})
	if err != nil {
		n.close()
		return nil, usageError{firstLine(err)}
	}
	if cfg.Dispatch == "claim" && sqlease.ValidateLeaseName(sqlstore.WorkerLeasePrefix+holder) != nil {
		log.Warn("worker_lease_unavailable", slog.String("holder_id", holder),
			slog.String("hint", "the holder id is not usable in a lease name (A-Z a-z 0-9 . _ : -, at most 121 characters): claims of this worker are reclaimed only after each job's lock_timeout"))
	} else if cfg.Dispatch == "claim" {
		var wel *election.Elector
		wel, err = election.New(election.Config{
			Store: leases(resilient.Wrap(store, resilient.Config{Logger: log})), LeaseName: sqlstore.WorkerLeasePrefix + holder, HolderID: holder,
			LeaseDuration: cfg.LeaseDuration, RenewInterval: cfg.RenewInterval, AcquireInterval: cfg.AcquireInterval,
			// Its events are the worker lease's, not leadership's:
			// worker_lease_acquired etc., so that no log reader takes a
			// claim-mode worker for the leader.
			Logger: slog.New(renamed{log.Handler(), "leader_", "worker_lease_"}),
			OnStartedLeading: func(ctx context.Context, tok sqlease.Token) {
				if err := n.sched.Work(ctx, tok, wel); err != nil {
					log.Error("claim_dispatch_failed", slog.String("error", err.Error()))
				}
			},
		})
		if err != nil {
			n.close()
			return nil, usageError{firstLine(err)}
		}
		n.worker = wel
	}
	// The leadership history, written by this node for its own terms.
	rec, err := history.New(history.Config{Store: store, Holder: holder, Next: obs, Retention: cfg.RunRetention, Logger: log})
	if err != nil {
		n.close()
		return nil, usageError{firstLine(err)}
	}
	go func() { _ = rec.Run(bg) }()
	ecfg := election.Config{
		// Transient errors are retried within each call's deadline, behind
		// a circuit breaker; the scheduler's loops retry on their next tick.
		Store: leases(resilient.Wrap(store, resilient.Config{Logger: log})), LeaseName: cfg.LeaseName, HolderID: holder,
		LeaseDuration: cfg.LeaseDuration, RenewInterval: cfg.RenewInterval, AcquireInterval: cfg.AcquireInterval,
		Logger: rec.Logger(log), Observer: rec, Changes: leaseChanges,
	}
	if cfg.Dispatch == "leader" {
		ecfg.OnStartedLeading = func(ctx context.Context, tok sqlease.Token) {
			// A failure is logged, and the term resigned, by Lead.
			_ = n.sched.Lead(ctx, n.elector, tok)
		}
	}
	if cfg.Election == "advisory" {
		ecfg.SessionLocker, err = sessionLocker(cfg)
		if err != nil {
			n.close()
			return nil, usageError{err}
		}
		if cfg.RequireSyncReplication {
			ecfg.SessionLocker = requireLocker(ecfg.SessionLocker, n.repl.check)
		}
	}
	n.elector, err = election.New(ecfg)
	if err != nil {
		n.close()
		return nil, usageError{firstLine(err)}
	}
	obs.WatchElector(n.elector.Status)

	// Daemon singletons: each on a lease of its own, with the node's
	// timings and election mode.
	smetrics := newSingletonMetrics(reg)
	scfg := singleton.NodeConfig{Store: store, Leases: ecfg.Store, SessionLocker: ecfg.SessionLocker,
		HolderID: holder, LeaseDuration: cfg.LeaseDuration, RenewInterval: cfg.RenewInterval, AcquireInterval: cfg.AcquireInterval,
		Logger: log, Observer: smetrics}
	if leaseFeed != nil {
		scfg.Changes = leaseFeed.Subscribe
	}
	snode, err := singleton.NewNode(scfg)
	if err != nil {
		n.close()
		return nil, usageError{firstLine(err)}
	}
	smetrics.node = snode
	n.singletonChanges = singletonChanges
	n.singletons = newSingletonHost(singletonAdmin{store: store, leases: store}, snode, cfg.apiBase(ln.Addr()), cfg.LeaseDuration, log)
	n.runs.api = cfg.apiBase(ln.Addr())
	n.singletons.exec = execPolicy

	// The API handler computes readiness; it is made after the dashboard
	// it serves, hence the indirection.
	n.version = shortVersion()
	dash, err := dashboard.New(dashboard.Config{Store: store, Scheduler: n.sched, Elector: n.elector, Singletons: n.singletons,
		Readiness: func() (bool, string) { return n.readiness() }, Version: n.version, Sessions: n.nodeSessions(),
		APIToken: cfg.APIToken, ListenAddr: cfg.HTTP, Logger: log,
		SecureCookies: cfg.SecureCookies, TrustForwardedProto: cfg.TrustForwardedProto, Durability: n.repl.Current})
	if err != nil {
		n.close()
		return nil, err
	}
	n.listener = ln
	api := httpapi.New(httpapi.Config{
		Dashboard: dash,
		Scheduler: n.sched, Leases: store, Elector: n.elector,
		Metrics:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		APIToken: cfg.APIToken, Stopping: n.stopping.Load, Logger: log,
		LeaderDispatch: cfg.Dispatch == "leader", Singletons: n.singletons, Checkpoints: n.runs, Durability: n.repl.Current, WriteCheck: n.writeCheck(),
		ListenAddr: cfg.HTTP, AllowedHosts: cfg.allowedHosts(), Exec: execPolicy,
	})
	n.server = newHTTPServer(log, ln, api)
	n.readiness = httpapi.Readiness(api)
	action.SetDestinationPolicy(destinations)
	built = true
	return n, nil
}

// nodeSessions is the dashboard's Config.Sessions: on PostgreSQL, where
// each node's lease feed connection is named after it; nil elsewhere.
func (n *Node) nodeSessions() func(ctx context.Context) (func(string) bool, error) {
	if d, _, _ := dialectOf(n.cfg.DB); d != "postgres" {
		return nil
	}
	return func(ctx context.Context) (func(string) bool, error) {
		live, err := postgres.NodeSessions(ctx, n.store.DB())
		if err != nil {
			return nil, err
		}
		return func(holder string) bool { return live[postgres.NodeSessionName(holder)] }, nil
	}
}

// presenceExtra is what the node's status record adds: session=pg when
// it keeps a named session (nodeSessions).
func (n *Node) presenceExtra() []string {
	if d, _, _ := dialectOf(n.cfg.DB); d == "postgres" {
		return []string{"session=pg"}
	}
	return nil
}

// writeCheck is the API's WriteCheck: the replication requirement, or nil.
func (n *Node) writeCheck() func() error {
	if !n.cfg.RequireSyncReplication {
		return nil
	}
	return n.repl.check
}

// Routes lists the node's HTTP routes with their policies.
func (n *Node) Routes() []httpapi.RouteInfo { return httpapi.RoutePolicies(n.server.Handler) }

// Addr is the address the HTTP API listens on.
func (n *Node) Addr() string { return n.listener.Addr().String() }

// Run serves until ctx ends, then shuts down gracefully: readiness reports
// stopping, no new runs start, in-flight runs get ShutdownTimeout, the lease
// is released so a follower takes over at once, and the HTTP server stops.
func (n *Node) Run(ctx context.Context) error {
	defer n.close()
	n.log.Info("node_started", slog.String("http", n.Addr()), slog.String("db", redact(n.cfg.DB)),
		slog.String("holder_id", n.elector.HolderID()), slog.String("dispatch", n.cfg.Dispatch), slog.String("api_url", n.runs.api))
	if !isLoopback(n.Addr()) && n.cfg.APIToken == "" {
		n.log.Warn("api_unprotected", slog.String("http", n.Addr()),
			slog.String("hint", "the API listens beyond loopback without --api-token: anyone who can reach it can create and run jobs"))
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- n.server.Serve(n.listener) }()

	// The elector and the claim loop run on their own context, cancelled
	// only after the drain below.
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = n.elector.Run(workCtx) }()
	wg.Add(1)
	go func() { defer wg.Done(); n.repl.run(workCtx) }()
	wg.Add(3)
	go func() {
		defer wg.Done()
		// Readiness and version ride on the presence as status records
		// written only when they change (history.RunPresence), so that
		// every node's dashboard shows every node's readiness at no idle
		// cost.
		history.RunPresence(workCtx, history.PresenceConfig{Store: n.store, Holder: n.elector.HolderID(),
			Status: n.readiness, Version: n.version, Extra: n.presenceExtra(), Recorder: n.store, Logger: n.log})
	}()
	go func() { defer wg.Done(); _ = n.singletons.node.Run(workCtx) }()
	go func() { defer wg.Done(); n.singletons.run(workCtx, n.singletonChanges) }()
	if n.cfg.Dispatch == "claim" {
		// Each worker holds a lease of its own, renewed like the leader's:
		// its claims are reclaimable as soon as that lease has expired
		// (a worker killed or frozen mid-run), not after lock_timeout,
		// and its runs stop by the lease's local deadline.
		wg.Add(1)
		if n.worker != nil {
			go func() { defer wg.Done(); _ = n.worker.Run(workCtx) }()
		} else {
			go func() { defer wg.Done(); _ = n.sched.Run(workCtx) }()
		}
	} else {
		wg.Add(1)
		go func() { defer wg.Done(); n.standby(workCtx) }()
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		err = fmt.Errorf("http server: %w", err)
	}
	n.stopping.Store(true)
	leading := n.elector.IsLeader()
	n.log.Info("node_stopping", slog.Duration("shutdown_timeout", n.cfg.ShutdownTimeout))
	dctx, cancel := context.WithTimeout(context.Background(), n.cfg.ShutdownTimeout)
	if derr := n.sched.Drain(dctx); derr != nil {
		n.log.Warn("drain_timeout", slog.String("hint", "in-flight runs are cancelled and will be retried by the next owner"))
	}
	cancel()
	stopWork() // cancels runs still in flight; the elector releases the lease
	wg.Wait()
	hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer hcancel()
	if serr := n.server.Shutdown(hctx); serr != nil && err == nil {
		err = serr
	}
	n.log.Info("node_stopped")
	if leading {
		// Our successor is taking over right now: end our database
		// sessions a moment later, so that their teardown does not compete
		// with its first statements (measured, advisory SIGTERM: signal →
		// first action net of waiting for it to fall due, 21–22 → 13–15
		// ms, medians of 11).
		time.Sleep(handoffGrace)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// localAddr is how a process on this machine reaches the listener:
// loopback in place of a wildcard address.
func localAddr(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sessionLocker returns advisory mode's session lock for the database:
// pg_advisory_lock, GET_LOCK or sp_getapplock, each on a dedicated
// connection of its own.
func sessionLocker(cfg Config) (sqlease.SessionLocker, error) {
	d, dsn, err := dialectOf(cfg.DB)
	if err != nil {
		return nil, err
	}
	switch d {
	case "postgres":
		return postgres.NewLocker(postgres.AdvisoryConfig{DSN: dsn, Prefix: cfg.TablePrefix})
	case "mysql":
		return mysql.NewLocker(mysql.AdvisoryConfig{DSN: dsn, Prefix: cfg.TablePrefix})
	case "sqlserver":
		return sqlserver.NewLocker(sqlserver.AdvisoryConfig{DSN: dsn, Prefix: cfg.TablePrefix})
	}
	return nil, usagef("election: advisory mode needs a database with session locks (postgres, mysql or sqlserver), not %s", d)
}

// handoffGrace is how long a node that led keeps its connections after
// releasing the lease on shutdown.
const handoffGrace = 100 * time.Millisecond

// standbyEvery is how often a follower warms its connection: within the
// pool's idle limit (sqlstore.TunePool), so that the connection lives on.
const standbyEvery = 4 * time.Minute

// standby keeps a follower ready to lead: it warms the statements a new
// leader runs first (sqlstore.Store.Warm), at start and every standbyEvery
// — 8 statements per follower, about 0.03/s — so that a takeover does not
// pay for a cold database session.
func (n *Node) standby(ctx context.Context) {
	t := time.NewTimer(time.Second) // after start-up traffic
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !n.elector.IsLeader() {
			if err := n.store.Warm(ctx); err != nil && ctx.Err() == nil {
				n.log.Debug("standby_warm_failed", slog.String("error", err.Error()))
			}
		}
		t.Reset(standbyEvery)
	}
}

// renamed is a log handler that renames messages starting with from to
// start with to.
type renamed struct {
	slog.Handler
	from, to string
}

func (h renamed) Handle(ctx context.Context, r slog.Record) error {
	if rest, ok := strings.CutPrefix(r.Message, h.from); ok {
		r.Message = h.to + rest
	}
	return h.Handler.Handle(ctx, r)
}

func (h renamed) WithAttrs(as []slog.Attr) slog.Handler {
	return renamed{h.Handler.WithAttrs(as), h.from, h.to}
}

func (h renamed) WithGroup(name string) slog.Handler {
	return renamed{h.Handler.WithGroup(name), h.from, h.to}
}
