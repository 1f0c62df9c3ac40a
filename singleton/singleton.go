// Package singleton runs long-lived work on exactly one node of a fleet
// (SPEC §4 "Singletons"): a named task whose body runs on the node that
// holds the singleton's own lease, with state that survives failover and a
// dead man's switch.
//
// # Guarantees
//
// Every node that wants a singleton registers it with its Node; the one that
// holds the lease "singleton:<name>" runs the body, the others wait. The
// body's context ends when the lease is lost (or can no longer be trusted:
// the elector's local deadline). Save writes the state in a transaction
// fenced by that lease and conditional on the (holder, epoch) that started
// this run, so a deposed instance — a paused process that wakes after its
// lease was taken over — can never overwrite a newer state: its Save returns
// an error wrapping sqlease.ErrLeaseLost and changes nothing. A new holder
// loads the last saved state before its body starts.
//
// State is JSON. Loading is best-effort (seed 003): fields the type no longer
// has are dropped, fields the saved state lacks keep the initial state's
// values, and a state that cannot be decoded at all falls back to the
// initial state with a Warn log and Observer.StateDecodeFailed — never a
// crash loop.
//
// # Stopping: graceful or lost
//
// A graceful stop keeps the body's last save. It is one of: Node.Run's
// context ends (the node shuts down), Unregister (the daemon: the
// singleton paused, deleted or redefined), or a rebalance giving the
// singleton to another node. The body's context ends while this node still
// holds the lease: its elector keeps renewing it, the gate stays open, and
// Save and Heartbeat are accepted — each still fenced by the lease and the
// (holder, epoch) in the database, so no save the database would not fence
// is ever accepted — until the body returns or Config.StopTimeout passes.
// Only then is the lease released (a handover: the next holder starts at
// once), so the next holder loads the body's last save and the two never
// run at once. Meanwhile the lease shows this node and epoch as the
// holder, as the singleton's row does.
//
// A lost lease or a fault is not graceful, and closes the gate at once:
// a renew that failed, the local deadline passed without a renew (a frozen
// or cut-off node: the lease may be taken over), a failed fence, a lost
// advisory session, or Config.StopTimeout passed on a graceful stop. The
// body's context ends too, but Save and Heartbeat return an error wrapping
// sqlease.ErrLeaseLost and change nothing. (The daemon: after SIGTERM, a
// process's saves answer 204 in the first case and 409 in the second.)
//
// # Failing
//
// A body that returns while the term goes on is started again after a
// backoff (NodeConfig.RestartBackoff, doubling up to 30 s; back to the
// first after a run that had lasted). Each such end is recorded in the
// singleton's row under the fence — last_error (the body's error), its
// database time, and failures: failed starts in a row, a failed start being
// a run that ended within FailedStartWithin of its start — so that every
// node shows it: FleetStatus is StatusFailing after FailingStarts of them,
// until a run has lasted FailedStartWithin. The row's restarts counts the
// starts after the first, by any node (after an end, a failover or a
// handover). A graceful stop or a lost term is no end of this kind.
//
// # Spreading over the fleet
//
// Each singleton has its own lease, and a node holds no more than its fair
// share, ⌈singletons / live nodes⌉, while another node is willing: it does
// not take a free lease beyond its share (for a few acquire intervals, so no
// singleton stays unplaced), and gives a surplus back, one at a time (a
// graceful stop, then Resign: released at once, the node then leaves it
// alone for a lease duration). Live nodes are
// known by a member lease each node renews, "member:<holder id>".
//
// # Dead man's switch
//
// The body calls Heartbeat (Save counts as one) at least every
// HeartbeatInterval. A running singleton whose last heartbeat is older than
// 2 × HeartbeatInterval, after a start grace of 2 × HeartbeatInterval, is
// stale: Node.Stale names it, for readiness checks and metrics.
package singleton

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/sqlstore"
)

// Defaults.
const (
	DefaultHeartbeatInterval = 30 * time.Second
	DefaultRestartBackoff    = time.Second
	DefaultStopTimeout       = 10 * time.Second
	maxRestartBackoff        = 30 * time.Second
)

// LeasePrefix and MemberPrefix start the names of singleton and member
// leases.
const (
	LeasePrefix  = "singleton:"
	MemberPrefix = sqlstore.MemberLeasePrefix
)

// Config describes one singleton of state type S.
type Config[S any] struct {
	// Name is the singleton's name: 1–128 characters of a-z 0-9 . _ -,
	// starting with a letter or digit (as job names).
	Name string
	// Initial is the state before anything was saved, and the defaults of
	// fields a saved state lacks.
	Initial S
	// Body runs while this node holds the singleton. It should return when
	// ctx ends. If it returns while the node still holds the singleton, it
	// is started again (with the state last saved) after a backoff.
	Body func(ctx context.Context, in *Instance[S]) error
	// HeartbeatInterval is how often the body promises to call Heartbeat
	// (or Save). Default DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// StopTimeout bounds a graceful stop (see "Stopping"): how long the
	// body may take to return after its context ended while this node
	// keeps the lease — renewing it, its gate open, Save accepted. Past
	// it the gate closes (Save refused) and the term ends as a lost one
	// does. Default DefaultStopTimeout.
	StopTimeout time.Duration
	// OnStarted runs when this node gains the singleton, before the body
	// first starts, with the fencing token; OnStopped when the body has
	// stopped for good in that term (the term lost, or a graceful stop).
	OnStarted func(ctx context.Context, tok sqlease.Token)
	OnStopped func(tok sqlease.Token)
}

// Observer receives singleton events for metrics. Nil ignores them.
type Observer interface {
	// StateDecodeFailed: a saved state could not be decoded; the body
	// starts from the initial state.
	StateDecodeFailed(name string)
	// Running reports whether this node runs the singleton now.
	Running(name string, running bool)
}

type nopObserver struct{}

func (nopObserver) StateDecodeFailed(string) {}
func (nopObserver) Running(string, bool)     {}

// NodeConfig configures a Node.
type NodeConfig struct {
	// Store keeps the singletons' state (required).
	Store *sqlstore.Store
	// Leases is the lease store the electors use. Default Store; pass a
	// resilient.Wrap of it to retry transient errors.
	Leases sqlease.LeaseStore
	// SessionLocker selects advisory mode for the singletons' leases.
	SessionLocker sqlease.SessionLocker
	// HolderID identifies this node. Default election.DefaultHolderID().
	HolderID string
	// LeaseDuration, RenewInterval, AcquireInterval: as election.Config.
	LeaseDuration, RenewInterval, AcquireInterval time.Duration
	// RestartBackoff is the first wait before a body that returned is
	// started again; it doubles up to 30 s. A start that failed on a
	// transient database error is retried after it, without doubling.
	// Default DefaultRestartBackoff.
	RestartBackoff time.Duration
	// Logger receives events with the singleton's name, holder and epoch.
	Logger   *slog.Logger
	Observer Observer
	// Clock is the local monotonic clock. Nil means the system clock.
	Clock sqlease.Clock
	// Changes, when set, returns a change feed of one lease and the
	// function that ends it (postgres.LeaseFeed.Subscribe): a follower of a
	// singleton then reads its lease when it is due to expire or changes
	// hands, instead of every acquire interval.
	Changes func(lease string) (<-chan struct{}, func())
}

// Node runs the singletons registered with it, competing for each with the
// other nodes.
type Node struct {
	cfg NodeConfig
	log *slog.Logger

	mu       sync.Mutex
	entries  []*entry
	running  bool
	stopping bool            // Run's context ended: bodies are being stopped, none starts
	runCtx   context.Context // while running: the context new entries' electors run under
	wg       sync.WaitGroup  // the running electors, the membership loop and handovers
	share    int             // this node's fair share, as last computed

	handingOver atomic.Bool // a rebalance is stopping a body to give its singleton back
}

// entry is one registered singleton, type-erased.
type entry struct {
	name        string
	interval    time.Duration
	stopTimeout time.Duration
	el          *election.Elector
	run         func(ctx context.Context, tok sqlease.Token) // the leading callback

	cancel      context.CancelFunc // stops its elector (Unregister)
	done        chan struct{}      // closed when its elector has returned
	unsubscribe func()             // ends its lease's change feed

	mu        sync.Mutex
	leading   bool
	tok       sqlease.Token
	startedAt time.Time // local: this term's start
	lastBeat  time.Time // local: the last successful heartbeat or save
	acquired  time.Time // local: when the term began, for picking a surplus to give back
	term      *termCtl  // the current term's body, while runTerm runs
	closing   bool      // Unregister: no body starts any more
}

// NewNode validates cfg and returns a Node.
func NewNode(cfg NodeConfig) (*Node, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: singleton: store is required", sqlease.ErrInvalidConfig)
	}
	if cfg.Leases == nil {
		cfg.Leases = cfg.Store
	}
	if cfg.HolderID == "" {
		cfg.HolderID = election.DefaultHolderID()
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = election.DefaultLeaseDuration
	}
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = election.DefaultRenewInterval
	}
	if cfg.AcquireInterval == 0 {
		cfg.AcquireInterval = election.DefaultAcquireInterval
	}
	if cfg.RestartBackoff <= 0 {
		cfg.RestartBackoff = DefaultRestartBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	if cfg.Clock == nil {
		cfg.Clock = sqlease.SystemClock{}
	}
	if err := sqlease.ValidateHolderID(cfg.HolderID); err != nil {
		return nil, fmt.Errorf("%w: singleton: holder_id: %v", sqlease.ErrInvalidConfig, err)
	}
	return &Node{cfg: cfg, log: cfg.Logger.With(slog.String("holder_id", cfg.HolderID)), share: math.MaxInt}, nil
}

// HolderID returns this node's holder id.
func (n *Node) HolderID() string { return n.cfg.HolderID }

// Register adds a singleton to n; on a running node it starts competing for
// it at once.
func Register[S any](n *Node, cfg Config[S]) error {
	if err := sqlease.ValidateJobName(cfg.Name); err != nil {
		return fmt.Errorf("singleton: %w", err)
	}
	if cfg.Body == nil {
		return fmt.Errorf("%w: singleton %q: body is required", sqlease.ErrInvalidConfig, cfg.Name)
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.HeartbeatInterval < 0 {
		return fmt.Errorf("%w: singleton %q: heartbeat interval must be positive, got %s", sqlease.ErrInvalidConfig, cfg.Name, cfg.HeartbeatInterval)
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.StopTimeout < 0 {
		return fmt.Errorf("%w: singleton %q: stop timeout must be positive, got %s", sqlease.ErrInvalidConfig, cfg.Name, cfg.StopTimeout)
	}
	if _, err := json.Marshal(cfg.Initial); err != nil {
		return fmt.Errorf("%w: singleton %q: initial state is not JSON: %v", sqlease.ErrInvalidConfig, cfg.Name, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, e := range n.entries {
		if e.name == cfg.Name {
			return fmt.Errorf("%w: singleton %q is registered twice", sqlease.ErrConflict, cfg.Name)
		}
	}
	e := &entry{name: cfg.Name, interval: cfg.HeartbeatInterval, stopTimeout: cfg.StopTimeout, unsubscribe: func() {}}
	ecfg := election.Config{
		Store: n.cfg.Leases, SessionLocker: n.cfg.SessionLocker, LeaseName: LeasePrefix + cfg.Name, HolderID: n.cfg.HolderID,
		LeaseDuration: n.cfg.LeaseDuration, RenewInterval: n.cfg.RenewInterval, AcquireInterval: n.cfg.AcquireInterval,
		Willing: n.willing, Logger: n.cfg.Logger.With(slog.String("singleton", cfg.Name)), Clock: n.cfg.Clock,
		OnStartedLeading: func(ctx context.Context, tok sqlease.Token) { e.run(ctx, tok) },
	}
	if n.cfg.Changes != nil {
		ecfg.Changes, e.unsubscribe = n.cfg.Changes(ecfg.LeaseName)
	}
	el, err := election.New(ecfg)
	if err != nil {
		e.unsubscribe()
		return fmt.Errorf("singleton %q: %w", cfg.Name, err)
	}
	e.el = el
	e.run = func(ctx context.Context, tok sqlease.Token) { runTerm(ctx, n, e, cfg, tok) }
	if n.running && !n.stopping && n.runCtx.Err() == nil {
		if err := n.cfg.Store.EnsureSingleton(n.runCtx, e.name); err != nil {
			e.unsubscribe()
			return err
		}
		n.start(e)
	}
	n.entries = append(n.entries, e)
	return nil
}

// start runs e's elector under the node's context (n.mu held).
func (n *Node) start(e *entry) {
	ctx, cancel := context.WithCancel(n.runCtx)
	e.cancel, e.done = cancel, make(chan struct{})
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer close(e.done)
		_ = e.el.Run(ctx)
	}()
}

// Unregister stops competing for the singleton name. If this node runs it,
// its body is stopped gracefully first (see "Stopping": its last Saves are
// accepted), then the lease is released. It reports whether name was
// registered.
func (n *Node) Unregister(name string) bool {
	n.mu.Lock()
	var e *entry
	for i, x := range n.entries {
		if x.name == name {
			e = x
			n.entries = append(n.entries[:i:i], n.entries[i+1:]...)
			break
		}
	}
	n.mu.Unlock()
	if e == nil {
		return false
	}
	e.mu.Lock()
	e.closing = true
	e.mu.Unlock()
	e.stopBody(n.log, sqlease.Token{})
	if e.cancel != nil {
		e.cancel()
		<-e.done
	}
	e.unsubscribe()
	return true
}

// Names returns the registered singletons' names.
func (n *Node) Names() []string {
	var out []string
	for _, e := range n.snapshot() {
		out = append(out, e.name)
	}
	sort.Strings(out)
	return out
}

// Run competes for every registered singleton (and those registered while
// it runs) and runs those this node holds, until ctx ends; then it stops
// the bodies gracefully (see "Stopping") and releases the leases.
func (n *Node) Run(ctx context.Context) error {
	n.mu.Lock()
	if n.running {
		n.mu.Unlock()
		return errors.New("singleton: node is already running")
	}
	for _, e := range n.entries {
		if err := n.cfg.Store.EnsureSingleton(ctx, e.name); err != nil {
			n.mu.Unlock()
			return err
		}
	}
	// The electors outlive ctx until the bodies have stopped: their
	// terms, renewed, are what keeps a stopping body's saves fenced.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	n.running, n.stopping, n.runCtx = true, false, runCtx
	for _, e := range n.entries {
		n.start(e)
	}
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.membership(runCtx) }()
	n.mu.Unlock()
	<-ctx.Done()
	n.mu.Lock()
	n.stopping = true
	n.mu.Unlock()
	var stops sync.WaitGroup
	for _, e := range n.snapshot() {
		stops.Add(1)
		go func() { defer stops.Done(); e.stopBody(n.log, sqlease.Token{}) }()
	}
	stops.Wait()
	cancel()
	n.wg.Wait()
	n.mu.Lock()
	n.running, n.stopping = false, false
	n.mu.Unlock()
	return nil
}

func (n *Node) snapshot() []*entry {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*entry(nil), n.entries...)
}

// Status is one singleton as this node sees it.
type Status struct {
	Name string
	// Running: this node runs it now, under Token.
	Running bool
	Token   sqlease.Token
	// HeartbeatAge is the time since the last heartbeat (or the start)
	// while Running.
	HeartbeatAge time.Duration
	// Stale: running, past the start grace, and the heartbeat is older than
	// 2 × HeartbeatInterval.
	Stale bool
	// HeartbeatInterval is the singleton's promise.
	HeartbeatInterval time.Duration
}

// Status reports every registered singleton, ordered by name.
func (n *Node) Status() []Status {
	now := n.cfg.Clock.Now()
	var out []Status
	for _, e := range n.snapshot() {
		e.mu.Lock()
		st := Status{Name: e.name, Running: e.leading, Token: e.tok, HeartbeatInterval: e.interval}
		if e.leading {
			st.HeartbeatAge = now.Sub(e.lastBeat)
			st.Stale = now.Sub(e.startedAt) > 2*e.interval && st.HeartbeatAge > 2*e.interval
		}
		e.mu.Unlock()
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Stale names the singletons this node runs whose heartbeat is stale, for
// readiness: a node running a stuck singleton is not ready.
func (n *Node) Stale() []string {
	var out []string
	for _, st := range n.Status() {
		if st.Stale {
			out = append(out, st.Name)
		}
	}
	return out
}

// Instance is one run of a singleton's body on the node that holds it.
type Instance[S any] struct {
	name string
	tok  sqlease.Token
	node *Node
	e    *entry

	mu    sync.Mutex
	state S
}

// Token is the fencing token of this run: the singleton lease's holder and
// epoch. Use it to fence writes of your own (election.Elector.Fenced).
func (in *Instance[S]) Token() sqlease.Token { return in.tok }

// ActDeadline returns the local instant by which what this run started
// outside the process must have stopped (election.Elector.ActUntil: it
// moves on with each renew, and keeps a graceful stop's deadline) — the
// zero time, long past, once a newer term has begun — and true: a run
// always has one. The body's context ends then anyway; this
// is for what acts outside the process and must be stopped from outside
// should the process be frozen (the daemon's guard).
func (in *Instance[S]) ActDeadline() (time.Time, bool) {
	if at, ok := in.e.el.ActUntil(in.tok); ok {
		return at, true
	}
	return time.Time{}, true // over
}

// State returns the current state: the one loaded when the run started, or
// the last one saved since.
func (in *Instance[S]) State() S {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.state
}

// Save makes s the singleton's state, durably: in a transaction fenced by
// the singleton's lease, conditional on this run's holder and epoch. It
// returns an error wrapping sqlease.ErrLeaseLost (and changes nothing) once
// this node no longer holds the singleton. A Save is also a heartbeat.
func (in *Instance[S]) Save(ctx context.Context, s S) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("save singleton %q: encode state: %w", in.name, err)
	}
	if err := in.e.el.Fenced(ctx, in.tok, func(tx *sql.Tx) error {
		return in.node.cfg.Store.SaveSingleton(ctx, tx, in.name, in.tok, b)
	}); err != nil {
		return lost(err)
	}
	in.mu.Lock()
	in.state = s
	in.mu.Unlock()
	in.e.beat(in.node.cfg.Clock.Now())
	return nil
}

// Heartbeat tells the fleet this run is making progress (the dead man's
// switch). It writes the heartbeat under the same fence as Save.
func (in *Instance[S]) Heartbeat(ctx context.Context) error {
	if err := in.e.el.Fenced(ctx, in.tok, func(tx *sql.Tx) error {
		return in.node.cfg.Store.HeartbeatSingleton(ctx, tx, in.name, in.tok)
	}); err != nil {
		return lost(err)
	}
	in.e.beat(in.node.cfg.Clock.Now())
	return nil
}

// lost makes a closed gate read as a lost lease to the body.
func lost(err error) error {
	if errors.Is(err, sqlease.ErrNotLeader) && !errors.Is(err, sqlease.ErrLeaseLost) {
		return fmt.Errorf("%w: %w", sqlease.ErrLeaseLost, err)
	}
	return err
}

func (e *entry) beat(at time.Time) {
	e.mu.Lock()
	e.lastBeat = at
	e.mu.Unlock()
}

// setLeading marks the singleton running here under tok from at (its
// start), or not running.
func (e *entry) setLeading(on bool, tok sqlease.Token, at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.leading, e.tok = on, tok
	if on {
		e.startedAt, e.lastBeat = at, at
	}
}

func (e *entry) setAcquired(at time.Time) {
	e.mu.Lock()
	e.acquired = at
	e.mu.Unlock()
}

// runTerm is a singleton's OnStartedLeading: record the start, load the
// state and run the body — again, after a backoff, if it returns while the
// term lasts. Only the end of the term ends it: a start the gate refuses
// while the term goes on is tried again, for the gate can open at the next
// renew (an advisory term acquired without the session lock, or an acquire
// whose answer came late, starts with it closed). The singleton counts as
// running here from a fenced start that succeeded until a start fails or
// the term ends, never while it only waits to start.
//
// The body runs under a context of its own, within the term's: a graceful
// stop (stopBody) ends it while the term goes on, and runTerm then returns
// without starting the body again.
func runTerm[S any](termCtx context.Context, n *Node, e *entry, cfg Config[S], tok sqlease.Token) {
	log := n.log.With(slog.String("singleton", cfg.Name), slog.Int64("lease_epoch", tok.Epoch))
	ctx, stop := context.WithCancel(termCtx)
	defer stop()
	t := &termCtl{tok: tok, stop: stop, done: make(chan struct{})}
	defer close(t.done)
	e.mu.Lock()
	e.term = t
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		if e.term == t {
			e.term = nil
		}
		e.mu.Unlock()
	}()
	// After the term is published: a stop that missed it set the flag
	// first (bodiesOff).
	if n.bodiesOff(e) {
		stop()
	}
	e.setAcquired(n.cfg.Clock.Now())
	running := false
	setRunning := func(on bool) {
		if on == running {
			return
		}
		running = on
		if on {
			e.setLeading(true, tok, n.cfg.Clock.Now())
		} else {
			e.setLeading(false, sqlease.Token{}, time.Time{})
		}
		n.cfg.Observer.Running(cfg.Name, on)
	}
	defer func() {
		setRunning(false)
		if cfg.OnStopped != nil {
			cfg.OnStopped(tok)
		}
		if termCtx.Err() == nil {
			log.Info("singleton_stopped", slog.String("reason", "graceful stop; the lease is given back next"))
		} else {
			log.Info("singleton_stopped")
		}
	}()
	if ctx.Err() != nil {
		return
	}
	if cfg.OnStarted != nil {
		cfg.OnStarted(ctx, tok)
	}
	backoff := n.cfg.RestartBackoff
	for ctx.Err() == nil {
		// Each start is recorded (started_at, restarts) under the fence.
		err := e.el.Fenced(ctx, tok, func(tx *sql.Tx) error { return n.cfg.Store.StartSingleton(ctx, tx, cfg.Name, tok) })
		if ctx.Err() != nil {
			return // the term is over, or the body is being stopped
		}
		var state S
		if err == nil {
			state, err = load(ctx, n, cfg, log)
		}
		wait, grow := backoff, true
		if err != nil {
			setRunning(false)
			switch {
			case errors.Is(err, sqlease.ErrLeaseLost) || errors.Is(err, sqlease.ErrNotLeader):
				// The gate is closed: until the next renew opens it, or
				// the elector ends the term (a lease truly lost).
				wait, grow = n.cfg.RenewInterval, false
			case errors.Is(err, sqlease.ErrTransient):
				// The database is away or refusing for now (a restart, a
				// cut, the breaker open): try again at the first wait, so
				// that the singleton runs again soon after it is back. The
				// backoff grows for bodies that return (a crash loop), and
				// for errors that waiting does not cure.
				wait, grow = n.cfg.RestartBackoff, false
			}
			log.Warn("singleton_start_failed", slog.String("error", err.Error()), slog.Duration("retry_in", wait))
		} else {
			setRunning(true)
			e.beat(n.cfg.Clock.Now()) // a start counts as a heartbeat
			in := &Instance[S]{name: cfg.Name, tok: tok, node: n, e: e, state: state}
			log.Info("singleton_started")
			began := n.cfg.Clock.Now()
			err = callBody(ctx, cfg.Body, in)
			if ctx.Err() != nil {
				return
			}
			ran := n.cfg.Clock.Now().Sub(began)
			quick := ran < FailedStartWithin
			if !quick {
				backoff = n.cfg.RestartBackoff // it had run well: not a crash loop
			}
			wait = backoff
			log.Warn("singleton_body_returned", slog.Any("error", err), slog.Duration("ran", ran), slog.Duration("restart_in", wait))
			recordEnd(ctx, n, e, cfg.Name, tok, err, quick, log)
		}
		again := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			again.Stop()
			return
		case <-again.C:
		}
		if grow {
			backoff = min(2*backoff, maxRestartBackoff)
		}
	}
}

// recordEnd records in the singleton's row, under the fence, that its run
// ended on its own, and why: the fleet shows it (last_error, and status
// failing after FailingStarts failed starts in a row). A refused or failed
// write is only logged: the run is over either way.
func recordEnd(ctx context.Context, n *Node, e *entry, name string, tok sqlease.Token, err error, quick bool, log *slog.Logger) {
	why := "the body returned without an error"
	if err != nil {
		why = err.Error()
	}
	if werr := e.el.Fenced(ctx, tok, func(tx *sql.Tx) error {
		return n.cfg.Store.FailSingleton(ctx, tx, name, tok, why, quick)
	}); werr != nil && ctx.Err() == nil {
		log.Warn("singleton_end_not_recorded", slog.String("error", werr.Error()))
	}
}

func callBody[S any](ctx context.Context, body func(context.Context, *Instance[S]) error, in *Instance[S]) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("singleton body panicked: %v", p)
		}
	}()
	return body(ctx, in)
}

// load reads the saved state and decodes it best-effort over a copy of the
// initial state.
func load[S any](ctx context.Context, n *Node, cfg Config[S], log *slog.Logger) (S, error) {
	row, err := n.cfg.Store.Singleton(ctx, cfg.Name)
	if err != nil {
		return cfg.Initial, err
	}
	state, ok := Decode(row.State, cfg.Initial)
	if !ok {
		log.Warn("singleton_state_undecodable", slog.String("hint", "the body starts from the initial state; the saved one is overwritten by its next Save"),
			slog.Int("state_bytes", len(row.State)))
		n.cfg.Observer.StateDecodeFailed(cfg.Name)
	}
	return state, nil
}

// Decode decodes a saved state best-effort (seed 003): over a deep copy of
// initial, so that fields the saved state lacks keep their initial values;
// unknown fields are dropped. A nil saved state is the initial state. ok is
// false when saved cannot be decoded at all; the result is then initial.
func Decode[S any](saved []byte, initial S) (state S, ok bool) {
	state = deepCopy(initial)
	if saved == nil {
		return state, true
	}
	if err := json.Unmarshal(saved, &state); err != nil {
		return deepCopy(initial), false
	}
	return state, true
}

// deepCopy copies v through JSON so that decoding into the copy cannot
// write through maps, slices or pointers shared with the initial state.
func deepCopy[S any](v S) S {
	var out S
	b, err := json.Marshal(v)
	if err != nil || json.Unmarshal(b, &out) != nil {
		return v
	}
	return out
}
