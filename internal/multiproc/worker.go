package multiproc

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/internal/ledger"
	"github.com/sqlease/sqlease/internal/tick"
	"github.com/sqlease/sqlease/sqlstore"
)

// WorkerConfig is what a worker is told through its environment
// (fleettest.Workers passes it as JSON).
type WorkerConfig struct {
	Dialect string // "sqlite" or "postgres"
	DSN     string // SQLite file path or PostgreSQL URL
	Prefix  string // table prefix of the lease store
	Holder  string

	fleettest.Lease
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

const (
	pauseNone = iota
	pauseSafe
	pauseInTx
)

type worker struct {
	cfg   WorkerConfig
	store *sqlstore.Store
	el    *election.Elector

	out fleettest.Out

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
	var err error
	w.cfg.Holder, err = fleettest.ReadConfig(&w.cfg)
	cfg := w.cfg
	if err != nil {
		w.emit(Event{Ev: EvFatal, Err: err.Error()})
		return 2
	}

	sigCtx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()
	ctx, cancel := context.WithCancel(sigCtx)
	defer cancel()

	var db *sql.DB
	db, w.store, err = fleettest.OpenStore(ctx, cfg.Dialect, cfg.DSN, cfg.Prefix)
	if err != nil {
		w.emit(Event{Ev: EvFatal, Err: err.Error()})
		return 2
	}
	defer db.Close()

	ec := cfg.Lease.Config(w.store, cfg.Holder)
	ec.OnStartedLeading = w.lead
	ec.OnStoppedLeading = func(tok sqlease.Token) {
		w.emit(Event{Ev: EvStoppedLeading, Epoch: tok.Epoch})
	}
	ec.OnNewLeader = func(holder string, epoch int64) {
		w.emit(Event{Ev: EvNewLeader, Leader: holder, Epoch: epoch})
	}
	ec.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ec.Observer = observer{w: w}
	w.el, err = election.New(ec)
	if err != nil {
		w.emit(Event{Ev: EvFatal, Err: err.Error()})
		return 2
	}

	goCh := make(chan struct{})
	go fleettest.ReadCommands(goCh, cancel, w.command)
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

// emit prints ev, stamped with the time, the holder and the pid.
func (w *worker) emit(ev Event) {
	if ev.T.IsZero() {
		ev.T = time.Now()
	}
	ev.Holder, ev.PID = w.cfg.Holder, os.Getpid()
	w.out.Print(ev)
}

// command runs one command read on stdin.
func (w *worker) command(cmd, _ string) {
	switch cmd {
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

// everyAct calls fn every ActInterval until ctx ends.
func (w *worker) everyAct(ctx context.Context, fn func()) {
	tick.Every(ctx, w.cfg.ActInterval, fn)
}

// probe knocks on the gate every ActInterval, leader or not.
func (w *worker) probe(ctx context.Context) {
	w.everyAct(ctx, func() {
		gateT := time.Now()
		tok, err := w.el.Require(ctx)
		if err != nil {
			if ctx.Err() == nil {
				w.probeRefused.Add(1)
			}
			return
		}
		w.act(tok, gateT, "probe")
	})
}

// bypass keeps writing with the last token once the gate is closed for it.
func (w *worker) bypass(ctx context.Context) {
	w.everyAct(ctx, func() {
		tok := w.lastTok.Load()
		if tok == nil || w.el.Ensure(*tok) == nil {
			return // never led, or leading: the acting loop writes
		}
		w.act(*tok, time.Time{}, "bypass")
	})
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
