package multiproc

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/internal/ledger"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/sqlite"
	"github.com/sqlease/sqlease/sqlstore"
)

// WorkerEnv, set to "1", makes TestMain run WorkerMain instead of the tests.
const WorkerEnv = "SQLEASE_MULTIPROC_WORKER"

// Environment of a worker (see WorkerConfig).
const (
	envDialect   = "SQLEASE_MP_DIALECT"
	envDSN       = "SQLEASE_MP_DSN"
	envPrefix    = "SQLEASE_MP_PREFIX"
	envLeaseName = "SQLEASE_MP_LEASE_NAME"
	envHolder    = "SQLEASE_MP_HOLDER"
	envLease     = "SQLEASE_MP_LEASE_DURATION"
	envRenew     = "SQLEASE_MP_RENEW_INTERVAL"
	envAcquire   = "SQLEASE_MP_ACQUIRE_INTERVAL"
	envJitter    = "SQLEASE_MP_ACQUIRE_JITTER"
	envMargin    = "SQLEASE_MP_SAFETY_MARGIN"
	envAct       = "SQLEASE_MP_ACT_INTERVAL"
	envBypass    = "SQLEASE_MP_BYPASS"
	envProbe     = "SQLEASE_MP_PROBE"
)

// WorkerConfig is what a worker is told through its environment.
type WorkerConfig struct {
	Dialect   string // "sqlite" or "postgres"
	DSN       string // SQLite file path or PostgreSQL URL
	Prefix    string // table prefix of the lease store
	LeaseName string
	Holder    string

	LeaseDuration   time.Duration
	RenewInterval   time.Duration
	AcquireInterval time.Duration
	AcquireJitter   float64
	SafetyMargin    time.Duration
	// ActInterval is the pause between two actions of the leader.
	ActInterval time.Duration

	// Bypass: after losing the gate, keep writing with the last token
	// straight through the store's Fenced (no gate), to show that the
	// database fence alone rejects a stale leader.
	Bypass bool
	// Probe: a second actor that tries the gate every ActInterval whether
	// leading or not, so that followers demonstrably knock on a closed gate.
	Probe bool
}

// Env returns the environment that passes c to a worker.
func (c WorkerConfig) Env() []string {
	return []string{
		WorkerEnv + "=1",
		envDialect + "=" + c.Dialect,
		envDSN + "=" + c.DSN,
		envPrefix + "=" + c.Prefix,
		envLeaseName + "=" + c.LeaseName,
		envHolder + "=" + c.Holder,
		envLease + "=" + c.LeaseDuration.String(),
		envRenew + "=" + c.RenewInterval.String(),
		envAcquire + "=" + c.AcquireInterval.String(),
		envJitter + "=" + strconv.FormatFloat(c.AcquireJitter, 'g', -1, 64),
		envMargin + "=" + c.SafetyMargin.String(),
		envAct + "=" + c.ActInterval.String(),
		envBypass + "=" + strconv.FormatBool(c.Bypass),
		envProbe + "=" + strconv.FormatBool(c.Probe),
	}
}

func configFromEnv() (WorkerConfig, error) {
	var errs []error
	dur := func(k string) time.Duration {
		d, err := time.ParseDuration(os.Getenv(k))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", k, err))
		}
		return d
	}
	flag := func(k string) bool {
		b, err := strconv.ParseBool(os.Getenv(k))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", k, err))
		}
		return b
	}
	jitter, err := strconv.ParseFloat(os.Getenv(envJitter), 64)
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %v", envJitter, err))
	}
	c := WorkerConfig{
		Dialect:         os.Getenv(envDialect),
		DSN:             os.Getenv(envDSN),
		Prefix:          os.Getenv(envPrefix),
		LeaseName:       os.Getenv(envLeaseName),
		Holder:          os.Getenv(envHolder),
		LeaseDuration:   dur(envLease),
		RenewInterval:   dur(envRenew),
		AcquireInterval: dur(envAcquire),
		AcquireJitter:   jitter,
		SafetyMargin:    dur(envMargin),
		ActInterval:     dur(envAct),
		Bypass:          flag(envBypass),
		Probe:           flag(envProbe),
	}
	return c, errors.Join(errs...)
}

const (
	pauseNone = iota
	pauseSafe
	pauseInTx
)

type worker struct {
	cfg   WorkerConfig
	store *sqlstore.Store
	el    *election.Elector

	outMu sync.Mutex

	seq          atomic.Int64
	lastTok      atomic.Pointer[sqlease.Token]
	pauseMode    atomic.Int32
	pauseReq     chan chan struct{} // the acting loop waits at a safe point for the next renew
	probeRefused atomic.Int64
}

// WorkerMain runs one worker and returns its exit status. It prints Events
// on stdout and its elector's log on stderr, waits for the "go" command on
// stdin, and runs until SIGTERM/SIGINT or the end of stdin (the test process
// went away), then releases the lease and returns 0.
func WorkerMain() int {
	w := &worker{pauseReq: make(chan chan struct{}, 1)}
	cfg, err := configFromEnv()
	w.cfg = cfg
	if err != nil {
		w.emit(Event{Ev: EvFatal, Err: err.Error()})
		return 2
	}

	sigCtx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()
	ctx, cancel := context.WithCancel(sigCtx)
	defer cancel()

	var db *sql.DB
	switch cfg.Dialect {
	case "sqlite":
		db, err = sqlite.Open(cfg.DSN)
		if err == nil {
			w.store, err = sqlite.New(db, cfg.Prefix)
		}
	case "postgres":
		db, err = postgres.Open(cfg.DSN)
		if err == nil {
			w.store, err = postgres.New(db, cfg.Prefix)
		}
	default:
		err = fmt.Errorf("unknown dialect %q", cfg.Dialect)
	}
	if err != nil {
		w.emit(Event{Ev: EvFatal, Err: err.Error()})
		return 2
	}
	defer db.Close()
	// The test applied the migrations; a ping makes "ready" mean connected.
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	err = db.PingContext(pctx)
	pcancel()
	if err != nil {
		w.emit(Event{Ev: EvFatal, Err: "ping: " + err.Error()})
		return 2
	}

	w.el, err = election.New(election.Config{
		Store:            w.store,
		LeaseName:        cfg.LeaseName,
		HolderID:         cfg.Holder,
		LeaseDuration:    cfg.LeaseDuration,
		RenewInterval:    cfg.RenewInterval,
		AcquireInterval:  cfg.AcquireInterval,
		AcquireJitter:    cfg.AcquireJitter,
		SafetyMargin:     cfg.SafetyMargin,
		OnStartedLeading: w.lead,
		OnStoppedLeading: func(tok sqlease.Token) {
			w.emit(Event{Ev: EvStoppedLeading, Epoch: tok.Epoch})
		},
		OnNewLeader: func(holder string, epoch int64) {
			w.emit(Event{Ev: EvNewLeader, Leader: holder, Epoch: epoch})
		},
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Observer: observer{w: w},
	})
	if err != nil {
		w.emit(Event{Ev: EvFatal, Err: err.Error()})
		return 2
	}

	goCh := make(chan struct{})
	go w.commands(cancel, goCh)
	w.emit(Event{Ev: EvReady})
	select {
	case <-goCh:
	case <-ctx.Done():
	}

	var bg sync.WaitGroup
	if cfg.Probe {
		bg.Go(func() { w.probe(ctx) })
	}
	if cfg.Bypass {
		bg.Go(func() { w.bypass(ctx) })
	}
	if err := w.el.Run(ctx); err != nil {
		w.emit(Event{Ev: EvFatal, Err: err.Error()})
		return 2
	}
	bg.Wait()
	if cfg.Probe {
		w.emit(Event{Ev: EvProbeStats, ProbeRefused: w.probeRefused.Load()})
	}
	w.emit(Event{Ev: EvExiting})
	return 0
}

// emit prints ev as one JSON line with a single write, so lines from
// different goroutines never interleave and each reaches the pipe at once.
func (w *worker) emit(ev Event) {
	if ev.T.IsZero() {
		ev.T = time.Now()
	}
	ev.Holder, ev.PID = w.cfg.Holder, os.Getpid()
	b, err := json.Marshal(ev)
	if err != nil {
		b = []byte(fmt.Sprintf(`{"ev":%q,"err":%q}`, EvFatal, err.Error()))
	}
	b = append(b, '\n')
	w.outMu.Lock()
	defer w.outMu.Unlock()
	_, _ = os.Stdout.Write(b)
}

// commands reads stdin. End of input means the test process is gone: stop.
func (w *worker) commands(cancel context.CancelFunc, goCh chan struct{}) {
	var once sync.Once
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch cmd := sc.Text(); cmd {
		case CmdGo:
			once.Do(func() { close(goCh) })
		case CmdStatus:
			st := w.el.Status()
			ev := Event{Ev: EvStatus, Leading: st.Leading, Epoch: st.Token.Epoch,
				Leader: st.Leader.Holder, LeaderEpoch: st.Leader.Epoch, LeaderKnown: st.LeaderKnown}
			if st.LastError != nil {
				ev.Err = st.LastError.Error()
			}
			w.emit(ev)
		case CmdPause:
			w.pauseMode.Store(pauseSafe)
		case CmdPauseInTx:
			w.pauseMode.Store(pauseInTx)
		default:
			w.emit(Event{Ev: EvFatal, Err: fmt.Sprintf("unknown command %q", cmd)})
		}
	}
	cancel()
}

// lead is OnStartedLeading: act every ActInterval while the gate is open.
func (w *worker) lead(ctx context.Context, tok sqlease.Token) {
	w.emit(Event{Ev: EvStartedLeading, Epoch: tok.Epoch})
	w.lastTok.Store(&tok)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		if w.pauseMode.CompareAndSwap(pauseSafe, pauseNone) {
			w.waitPaused(ctx)
		}
		gateT := time.Now()
		cur, err := w.el.Require(ctx)
		if err != nil {
			w.emit(Event{Ev: EvGateRefused, Epoch: tok.Epoch, Err: err.Error(),
				NotLeader: errors.Is(err, sqlease.ErrNotLeader)})
			if ctx.Err() != nil {
				return
			}
		} else {
			w.act(cur, gateT, "")
		}
		timer.Reset(w.cfg.ActInterval)
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
	}
}

// act performs one action: a ledger row written in a fenced transaction,
// through the elector (gate + fence) or, for the bypass actor, straight
// through the store's fence with a possibly stale token.
func (w *worker) act(tok sqlease.Token, gateT time.Time, actor string) {
	seq := w.seq.Add(1)
	if actor != "bypass" {
		w.emit(Event{Ev: EvActed, Epoch: tok.Epoch, Seq: seq, GateT: gateT, Actor: actor})
	}
	note := Note(w.cfg.Holder, actor, seq)
	// Not the leading context: the database fence, not a cancelled context,
	// must be what stops a stale write.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fn := func(tx *sql.Tx) error {
		if err := ledger.Append(ctx, tx, w.cfg.Dialect, w.cfg.Holder, tok.Epoch, note); err != nil {
			return err
		}
		if actor == "" && w.pauseMode.CompareAndSwap(pauseInTx, pauseNone) {
			w.selfStop(seq, true)
		}
		return nil
	}
	var err error
	if actor == "bypass" {
		err = w.store.Fenced(ctx, tok, fn)
	} else {
		err = w.el.Fenced(ctx, tok, fn)
	}
	ev := Event{Ev: EvFencedOK, Epoch: tok.Epoch, Seq: seq, GateT: gateT, Actor: actor}
	if err != nil {
		ev.Ev, ev.Err = EvFencedFailed, err.Error()
		ev.LeaseLost = errors.Is(err, sqlease.ErrLeaseLost)
		ev.NotLeader = errors.Is(err, sqlease.ErrNotLeader)
	}
	w.emit(ev)
}

// probe knocks on the gate every ActInterval, leader or not.
func (w *worker) probe(ctx context.Context) {
	t := time.NewTicker(w.cfg.ActInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		gateT := time.Now()
		tok, err := w.el.Require(ctx)
		if err != nil {
			if ctx.Err() == nil {
				w.probeRefused.Add(1)
			}
			continue
		}
		w.act(tok, gateT, "probe")
	}
}

// bypass keeps writing with the last token once the gate is closed for it.
func (w *worker) bypass(ctx context.Context) {
	t := time.NewTicker(w.cfg.ActInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tok := w.lastTok.Load()
		if tok == nil || w.el.Ensure(*tok) == nil {
			continue // never led, or leading: the acting loop writes
		}
		w.act(*tok, time.Time{}, "bypass")
	}
}

// waitPaused parks the acting loop at a safe point (no transaction open)
// until the elector's next renew has completed, SIGSTOPped the process and
// been continued (see observer.Renewed).
func (w *worker) waitPaused(ctx context.Context) {
	req := make(chan struct{})
	select {
	case w.pauseReq <- req:
	default:
		return
	}
	select {
	case <-req:
	case <-ctx.Done():
		select {
		case <-w.pauseReq: // withdraw the request
		default:
			<-req // the observer took it: it is pausing now
		}
	}
}

// selfStop prints "pausing", stops the whole process with SIGSTOP and, once
// continued, prints "resumed".
func (w *worker) selfStop(seq int64, inTx bool) {
	w.emit(Event{Ev: EvPausing, Seq: seq, InTx: inTx})
	// Signal this very thread: a process-directed SIGSTOP may be taken by
	// another thread, letting this one run on for a moment before the group
	// stop reaches it. A thread-directed one is handled on the way out of
	// the system call, so nothing runs after it until SIGCONT.
	runtime.LockOSThread()
	_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
	runtime.UnlockOSThread()
	w.emit(Event{Ev: EvResumed, Seq: seq, InTx: inTx})
}

// observer pauses the process right after a renew when the acting loop has
// asked for it: then neither the renewal nor an action has a statement or
// transaction in flight, so the stopped process holds no database lock.
type observer struct {
	sqlease.NopObserver
	w *worker
}

func (o observer) Renewed(string, time.Duration, error) {
	select {
	case req := <-o.w.pauseReq:
		o.w.selfStop(0, false)
		close(req)
	default:
	}
}
