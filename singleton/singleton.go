// Package singleton runs long-lived work on exactly one node of a fleet
// (SPEC §4 "Singletons"): a named task whose body runs on the node its
// singleton is assigned to, with state that survives failover and a dead
// man's switch.
//
// # Placement by node
//
// A node's liveness is one lease, its member lease "member:<holder id>",
// held by an election.Elector (lease or advisory mode) and renewed once
// per renew interval whatever the node runs. Singletons are assigned to
// nodes by their rows (node, the node's member-lease epoch, and a
// generation that grows at every assignment; model/assign.pml): each renew
// interval a node reads the placement (one statement), takes singletons
// whose node is dead — its member lease expired in database time; a dead
// node is never counted live — or that are unassigned, up to its fair share
// ⌈singletons / live nodes⌉ (beyond it when nobody else takes them), gives
// a surplus to a live node below its share once the bodies it gives have
// stopped, and runs the bodies of what is assigned to it.
//
// # Guarantees
//
// A body acts only until its node's member-lease local deadline (the
// elector's rule: renew send time + lease − margin), which falls before the
// lease can expire in database time, and so before another node can take
// its singletons: its context ends, and its gate closes, at once when the
// member lease is lost or not renewed in time. Its fencing token is
// (node, generation): Save is one statement fenced by the generation and by
// the node's member lease being live in database time, so a deposed
// instance — a paused process that wakes after its singleton was placed
// elsewhere — can never overwrite a newer state: its Save returns an error
// wrapping sqlease.ErrLeaseLost and changes nothing. A new holder loads the
// last saved state before its body starts.
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
// holds the assignment: the member lease is renewed, the gate stays open,
// and Save and Heartbeat are accepted — each still fenced in the database —
// until the body returns or Config.StopTimeout passes. Only then does the
// assignment move (given to another node, or freed by the release of the
// member lease at shutdown), so the next holder loads the body's last save
// and the two never run at once.
//
// A lost lease or a fault is not graceful, and closes the gate at once:
// a member-lease renew that failed, the local deadline passed without a
// renew (a frozen or cut-off node), a fenced write refused by the database,
// a lost advisory session, or Config.StopTimeout passed on a graceful stop.
// The body's context ends too, but Save and Heartbeat return an error
// wrapping sqlease.ErrLeaseLost and change nothing. (The daemon: after
// SIGTERM, a process's saves answer 204 in the first case and 409 in the
// second.)
//
// # Failing
//
// A body that returns while the node holds its singleton is started again
// after a backoff (NodeConfig.RestartBackoff, doubling up to 30 s; back to
// the first after a run that had lasted). Each such end is recorded in the
// singleton's row under the fence — last_error (the body's error), its
// database time, and failures: failed starts in a row, a failed start being
// a run that ended within FailedStartWithin of its start — so that every
// node shows it: FleetStatus is StatusFailing after FailingStarts of them,
// until a run has lasted FailedStartWithin. The row's restarts counts the
// starts after the first, by any node (after an end, a failover or a
// handover). A graceful stop or a lost term is no end of this kind.
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
	maxStarting              = 16 // starts recorded at once on a node (runTerm)
)

// LeasePrefix starts the names of the per-singleton leases of the protocol
// before placement by node (see "Rolling upgrade" in docs/singletons.md),
// and the Name of a singleton's Token; MemberPrefix starts the name of a
// node's member lease.
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
	// keeps the assignment — its member lease renewed, its gate open, Save
	// accepted. Past it the gate closes (Save refused) and the term ends
	// as a lost one does. Default DefaultStopTimeout.
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
	// Store keeps the singletons' state and assignments (required).
	Store *sqlstore.Store
	// Leases is the lease store the member lease's elector uses. Default
	// Store; pass a resilient.Wrap of it to retry transient errors.
	Leases sqlease.LeaseStore
	// SessionLocker selects advisory mode for the member lease.
	SessionLocker sqlease.SessionLocker
	// HolderID identifies this node. Default election.DefaultHolderID().
	HolderID string
	// LeaseDuration, RenewInterval, AcquireInterval: as election.Config,
	// for the member lease. The placement is read every RenewInterval.
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
	// function that ends it (postgres.LeaseFeed.Subscribe): the member
	// lease's elector then learns at once of a change of its lease.
	Changes func(lease string) (<-chan struct{}, func())
}

// Node runs the singletons registered with it that are assigned to it,
// placing them over the fleet with the other nodes.
type Node struct {
	cfg    NodeConfig
	log    *slog.Logger
	member *election.Elector

	mu           sync.Mutex
	entries      []*entry
	running      bool
	stopping     bool            // Run's context ended: bodies are being stopped, none starts
	runCtx       context.Context // while running
	wg           sync.WaitGroup  // the member elector, terms and handovers
	memberCancel context.CancelFunc
	memberDone   chan struct{}
	unsubscribe  func()
	kick         chan struct{}   // wakes the placement loop (a change here)
	starting     chan struct{}   // a slot per start being recorded (maxStarting)
	dirty        atomic.Bool     // the assignments must be read again
	handingOver  atomic.Bool     // a rebalance is stopping bodies to give them away
	fenced       map[string]bool // singletons whose old lease holds the upgrade fence (mu)
}

// entry is one registered singleton, type-erased.
type entry struct {
	name        string
	interval    time.Duration
	stopTimeout time.Duration
	run         func(t *term) // runTerm for this singleton's type

	mu        sync.Mutex
	leading   bool
	tok       sqlease.Token
	startedAt time.Time // local: this run's start
	lastBeat  time.Time // local: the last successful heartbeat or save
	acquired  time.Time // local: when the term began, for picking a surplus to give away
	term      *term     // the current term, while its runTerm runs
	closing   bool      // Unregister: no body starts any more
	giving    bool      // a rebalance stops it to give it away: not started again
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
	n := &Node{cfg: cfg, log: cfg.Logger.With(slog.String("holder_id", cfg.HolderID)), kick: make(chan struct{}, 1),
		starting: make(chan struct{}, maxStarting), unsubscribe: func() {}}
	ecfg := election.Config{
		Store: memberStore{LeaseStore: cfg.Leases, st: cfg.Store}, SessionLocker: cfg.SessionLocker, LeaseName: MemberPrefix + cfg.HolderID, HolderID: cfg.HolderID,
		LeaseDuration: cfg.LeaseDuration, RenewInterval: cfg.RenewInterval, AcquireInterval: cfg.AcquireInterval,
		Logger: cfg.Logger.With(slog.String("member", cfg.HolderID)), Clock: cfg.Clock,
		OnStartedLeading: n.lead,
	}
	if cfg.Changes != nil {
		ecfg.Changes, n.unsubscribe = cfg.Changes(ecfg.LeaseName)
	}
	el, err := election.New(ecfg)
	if err != nil {
		n.unsubscribe()
		return nil, fmt.Errorf("singleton: member lease: %w", err)
	}
	n.member = el
	return n, nil
}

// HolderID returns this node's holder id.
func (n *Node) HolderID() string { return n.cfg.HolderID }

// Register adds a singleton to n; on a running node it is placed at once.
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
	e := &entry{name: cfg.Name, interval: cfg.HeartbeatInterval, stopTimeout: cfg.StopTimeout}
	e.run = func(t *term) { runTerm(n, e, cfg, t) }
	if n.running && !n.stopping && n.runCtx.Err() == nil {
		if err := n.cfg.Store.EnsureSingleton(n.runCtx, e.name); err != nil {
			return err
		}
	}
	n.entries = append(n.entries, e)
	if n.running && !n.stopping {
		n.startMember()
		n.changed()
	}
	return nil
}

// startMember runs the member lease's elector while singletons are
// registered (n.mu held): a node without any holds no member lease and
// costs no statements.
func (n *Node) startMember() {
	if n.memberCancel != nil || len(n.entries) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(n.runCtx)
	done := make(chan struct{})
	n.memberCancel, n.memberDone = cancel, done
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer close(done)
		_ = n.member.Run(ctx)
	}()
}

// stopMember ends the member elector, which releases the member lease
// (after its placement loop has returned), and waits for it.
func (n *Node) stopMember() {
	n.mu.Lock()
	cancel, done := n.memberCancel, n.memberDone
	n.memberCancel, n.memberDone = nil, nil
	n.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// changed wakes the placement loop to read the assignments again.
func (n *Node) changed() {
	n.dirty.Store(true)
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// Unregister stops running the singleton name here. If this node runs it,
// its body is stopped gracefully first (see "Stopping": its last Saves are
// accepted), then its assignment is given to another live node (if there
// is one: else it stays assigned here until this node stops). It reports
// whether name was registered.
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
	empty := len(n.entries) == 0
	n.mu.Unlock()
	if e == nil {
		return false
	}
	e.mu.Lock()
	e.closing = true
	t := e.term
	e.mu.Unlock()
	if t != nil {
		e.stopBody(n.log, t)
		n.giveAway(context.Background(), t.mtok, []string{name})
	}
	if empty {
		n.stopMember()
	}
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

// Run holds this node's member lease while singletons are registered,
// places them with the other nodes and runs those assigned here, until ctx
// ends; then it stops the bodies gracefully (see "Stopping") and releases
// the member lease, which frees their assignments for the other nodes.
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
	// The member elector outlives ctx until the bodies have stopped: its
	// renewed lease is what keeps a stopping body's saves fenced.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	n.running, n.stopping, n.runCtx = true, false, runCtx
	n.startMember()
	n.mu.Unlock()
	<-ctx.Done()
	n.mu.Lock()
	n.stopping = true
	n.mu.Unlock()
	var stops sync.WaitGroup
	for _, e := range n.snapshot() {
		e.mu.Lock()
		t := e.term
		e.mu.Unlock()
		if t == nil {
			continue
		}
		stops.Add(1)
		go func() { defer stops.Done(); e.stopBody(n.log, t) }()
	}
	stops.Wait()
	n.stopMember()
	cancel()
	n.wg.Wait()
	n.mu.Lock()
	n.running, n.stopping = false, false
	n.mu.Unlock()
	n.unsubscribe()
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
	// Running: this node runs it now, under Token (the node and the
	// assignment's generation).
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
	node *Node
	e    *entry
	t    *term

	mu    sync.Mutex
	state S
}

// Token is the fencing token of this run: Name LeasePrefix + the
// singleton's name, Holder this node, Epoch the assignment's generation
// (it grows at every assignment and never goes back). Fence writes of your
// own with Fenced (not sqlstore.Store.Fenced: no lease carries this token).
func (in *Instance[S]) Token() sqlease.Token { return in.t.tok }

// ActDeadline returns the local instant by which what this run started
// outside the process must have stopped — the node's member-lease local
// deadline, moving on with each renew, and kept through a graceful stop;
// the zero time, long past, once the term is over — and true: a run
// always has one. The body's context ends then anyway; this is for what
// acts outside the process and must be stopped from outside should the
// process be frozen (the daemon's guard).
func (in *Instance[S]) ActDeadline() (time.Time, bool) {
	return in.t.actUntil(in.node), true
}

// State returns the current state: the one loaded when the run started, or
// the last one saved since.
func (in *Instance[S]) State() S {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.state
}

// Save makes s the singleton's state, durably, in one statement fenced by
// the assignment: its generation is this run's and the node's member lease
// is live in database time. It returns an error wrapping
// sqlease.ErrLeaseLost (and changes nothing) once this node no longer holds
// the singleton. A Save is also a heartbeat.
func (in *Instance[S]) Save(ctx context.Context, s S) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("save singleton %q: encode state: %w", in.name, err)
	}
	if err := in.t.write(ctx, in.node, func(ctx context.Context) error {
		return in.node.cfg.Store.SaveAssigned(ctx, in.name, in.t.tok, b)
	}); err != nil {
		return err
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
	if err := in.t.write(ctx, in.node, func(ctx context.Context) error {
		return in.node.cfg.Store.HeartbeatAssigned(ctx, in.name, in.t.tok)
	}); err != nil {
		return err
	}
	in.e.beat(in.node.cfg.Clock.Now())
	return nil
}

// Fenced runs fn in a database transaction fenced by this run's
// assignment (sqlstore.Store.FencedAssigned), for writes of the body's own
// that must not happen once another node may run the singleton: it returns
// an error wrapping sqlease.ErrLeaseLost, and commits nothing, once this
// node no longer holds it (the term then ends, as after a refused Save). An
// error of fn is returned as is. It counts as a heartbeat.
func (in *Instance[S]) Fenced(ctx context.Context, fn func(*sql.Tx) error) error {
	if err := in.t.write(ctx, in.node, func(ctx context.Context) error {
		return in.node.cfg.Store.FencedAssigned(ctx, in.name, in.t.tok, fn)
	}); err != nil {
		return err
	}
	in.e.beat(in.node.cfg.Clock.Now())
	return nil
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

// runTerm runs a singleton's term — this node's assignment under one
// generation: record the start, load the state and run the body — again,
// after a backoff, if it returns while the term lasts. The singleton counts
// as running here from a fenced start that succeeded until the body
// returns or the term ends, never while it only waits to start.
//
// The body runs under the term's context: a graceful stop (stopBody) ends
// it with the gate still open, a loss (term.lose) closes the gate first.
func runTerm[S any](n *Node, e *entry, cfg Config[S], t *term) {
	defer close(t.done)
	defer t.stop()
	ctx := t.ctx
	tok := t.tok
	log := n.log.With(slog.String("singleton", cfg.Name), slog.Int64("lease_epoch", tok.Epoch))
	defer func() {
		e.mu.Lock()
		if e.term == t {
			e.term = nil
		}
		e.mu.Unlock()
		// The assignments decide at the next reading whether it runs
		// again (not at once: a start refused again and again would spin).
		n.dirty.Store(true)
	}()
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
		if t.gateOpen(n) {
			log.Info("singleton_stopped", slog.String("reason", "graceful stop; the assignment moves next"))
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
	first := t.first
	for ctx.Err() == nil {
		var state S
		var err error
		if first != nil {
			// Recorded with the term's placement, the state read with it
			// (placer.startBatch).
			if first.refused {
				t.lose()
				err = fmt.Errorf("start singleton %s under %s: %w", cfg.Name, tok, sqlease.ErrLeaseLost)
			} else {
				state = decodeState(n, cfg, first.state, log)
			}
			first = nil
		} else {
			// Each start is recorded (started_at, restarts) under the
			// fence, and the state read: at most maxStarting at once on a
			// node, so that many at once run on the pool's idle
			// connections instead of opening as many new ones (334 at
			// once took 0.9–1.8 s on PostgreSQL, a busy 2-core machine).
			select {
			case n.starting <- struct{}{}:
			case <-ctx.Done():
				return
			}
			err = t.write(ctx, n, func(ctx context.Context) error { return n.cfg.Store.StartAssigned(ctx, cfg.Name, tok) })
			if ctx.Err() != nil {
				<-n.starting
				return // the term is over, or the body is being stopped
			}
			if err == nil {
				state, err = load(ctx, n, cfg, log)
			}
			<-n.starting
		}
		if errors.Is(err, sqlease.ErrLeaseLost) {
			// Refused: the assignment is no longer this term's, or the
			// member lease is not live in database time. The term is over;
			// the placement loop reads the assignments again.
			log.Warn("singleton_start_refused", slog.String("error", err.Error()))
			return
		}
		wait, grow := backoff, true
		if err != nil {
			setRunning(false)
			if errors.Is(err, sqlease.ErrTransient) {
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
			in := &Instance[S]{name: cfg.Name, node: n, e: e, t: t, state: state}
			log.Info("singleton_started")
			began := n.cfg.Clock.Now()
			err = callBody(ctx, cfg.Body, in)
			if ctx.Err() != nil {
				return
			}
			setRunning(false)
			ran := n.cfg.Clock.Now().Sub(began)
			quick := ran < FailedStartWithin
			if !quick {
				backoff = n.cfg.RestartBackoff // it had run well: not a crash loop
			}
			wait = backoff
			log.Warn("singleton_body_returned", slog.Any("error", err), slog.Duration("ran", ran), slog.Duration("restart_in", wait))
			recordEnd(ctx, n, t, cfg.Name, err, quick, log)
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
func recordEnd(ctx context.Context, n *Node, t *term, name string, err error, quick bool, log *slog.Logger) {
	why := "the body returned without an error"
	if err != nil {
		why = err.Error()
	}
	if werr := t.write(ctx, n, func(ctx context.Context) error {
		return n.cfg.Store.FailAssigned(ctx, name, t.tok, why, quick)
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
	return decodeState(n, cfg, row.State, log), nil
}

// decodeState decodes a saved state as load does.
func decodeState[S any](n *Node, cfg Config[S], saved []byte, log *slog.Logger) S {
	state, ok := Decode(saved, cfg.Initial)
	if !ok {
		log.Warn("singleton_state_undecodable", slog.String("hint", "the body starts from the initial state; the saved one is overwritten by its next Save"),
			slog.Int("state_bytes", len(saved)))
		n.cfg.Observer.StateDecodeFailed(cfg.Name)
	}
	return state
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
