package schedproc

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/internal/ledger"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// Dispatch modes.
const (
	ModeClaim  = "claim"
	ModeLeader = "leader"
)

// WorkerConfig is what a worker is told through its environment.
type WorkerConfig struct {
	Dialect string // "sqlite" or "postgres"
	DSN     string // SQLite file path or PostgreSQL URL
	Prefix  string // table prefix of the store (and of the execs table)
	Holder  string
	Mode    string // ModeClaim or ModeLeader

	// Claim mode.
	PollInterval time.Duration
	BatchSize    int

	// Leader mode.
	fleettest.Lease
	RefreshInterval time.Duration
	// ListenJobs (PostgreSQL, leader mode): refresh the schedule on the
	// jobs table's change feed (postgres.ListenJobs), as the daemon does.
	ListenJobs bool

	// ExecJitter: the handler first sleeps a random time up to this, to
	// spread the executions of concurrent workers.
	ExecJitter time.Duration
	// SlowJob's first attempt sleeps SlowFor (or until its context ends)
	// after recording its execution.
	SlowJob string
	SlowFor time.Duration

	// Drain: on shutdown call Scheduler.Drain before stopping the
	// dispatcher, as the daemon does. Without it the dispatcher's context is
	// cancelled at once (claim mode still waits for its runs; in leader mode
	// the elector resigns and the runs in flight are cancelled).
	Drain bool
}

// ExecsTable is the table of executions for a store prefix.
func ExecsTable(prefix string) string { return prefix + "_execs" }

// execsSQL returns (migration, insert) of the execs table. The insert takes
// (job, scheduled_for, attempt, holder, epoch, pid) and stamps the database
// clock. There is deliberately no unique key: a duplicate execution must
// show up as two rows.
func execsSQL(dialect, prefix string) (string, string, error) {
	tbl := ExecsTable(prefix)
	switch dialect {
	case "sqlite":
		return `CREATE TABLE IF NOT EXISTS ` + tbl + ` (
	id            INTEGER PRIMARY KEY AUTOINCREMENT,
	job           TEXT    NOT NULL,
	scheduled_for TEXT    NOT NULL,
	attempt       INTEGER NOT NULL,
	holder        TEXT    NOT NULL,
	epoch         INTEGER NOT NULL,
	pid           INTEGER NOT NULL,
	db_time       TEXT    NOT NULL
)`, `INSERT INTO ` + tbl + ` (job, scheduled_for, attempt, holder, epoch, pid, db_time)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, strftime('%Y-%m-%d %H:%M:%f','now'))`, nil
	case "postgres":
		return `CREATE TABLE IF NOT EXISTS ` + tbl + ` (
	id            bigserial   PRIMARY KEY,
	job           text        NOT NULL,
	scheduled_for text        NOT NULL,
	attempt       integer     NOT NULL,
	holder        text        NOT NULL,
	epoch         bigint      NOT NULL,
	pid           integer     NOT NULL,
	db_time       timestamptz NOT NULL
)`, `INSERT INTO ` + tbl + ` (job, scheduled_for, attempt, holder, epoch, pid, db_time)
VALUES ($1, $2, $3, $4, $5, $6, clock_timestamp())`, nil
	}
	return "", "", fmt.Errorf("schedproc: unknown dialect %q", dialect)
}

// FaultsTable holds the names of jobs whose run inserts fail.
func FaultsTable(prefix string) string { return prefix + "_faults" }

// faultSQL creates the fault-injection table and a trigger that makes every
// insert into the runs table fail for a job named in it, as a database
// error in the middle of Store.StartRun would.
func faultSQL(dialect, prefix string) ([]string, error) {
	faults, runs := FaultsTable(prefix), prefix+"_runs"
	switch dialect {
	case "sqlite":
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + faults + ` (job TEXT PRIMARY KEY)`,
			`CREATE TRIGGER IF NOT EXISTS ` + runs + `_fault BEFORE INSERT ON ` + runs + `
WHEN EXISTS (SELECT 1 FROM ` + faults + ` WHERE job = NEW.job_name)
BEGIN SELECT RAISE(ABORT, 'injected fault'); END`,
		}, nil
	case "postgres":
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + faults + ` (job text PRIMARY KEY)`,
			`CREATE OR REPLACE FUNCTION ` + runs + `_fault() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM ` + faults + ` WHERE job = NEW.job_name) THEN
		RAISE EXCEPTION 'injected fault';
	END IF;
	RETURN NEW;
END $$`,
			`CREATE OR REPLACE TRIGGER ` + runs + `_fault BEFORE INSERT ON ` + runs + ` FOR EACH ROW EXECUTE FUNCTION ` + runs + `_fault()`,
		}, nil
	}
	return nil, fmt.Errorf("schedproc: unknown dialect %q", dialect)
}

type worker struct {
	cfg    WorkerConfig
	db     *sql.DB
	store  *sqlstore.Store
	sched  *scheduler.Scheduler
	el     *election.Elector
	insert string

	out fleettest.Out

	pauseArmed atomic.Bool
	pauseReq   chan pauseReq // a handler waits here for the next renew
}

// pauseReq asks the observer to stop the process after the next renew.
type pauseReq struct {
	run  sqlease.Run
	done chan struct{} // closed once the process was continued
}

// WorkerMain runs one worker and returns its exit status. It prints Events
// on stdout and the scheduler's and elector's logs on stderr, waits for the
// "go" command on stdin, and dispatches until SIGTERM/SIGINT or the end of
// stdin, then shuts down gracefully and returns 0.
func WorkerMain() int {
	w := &worker{pauseReq: make(chan pauseReq, 1)}
	var err error
	if w.cfg.Holder, err = fleettest.ReadConfig(&w.cfg); err != nil {
		w.emit(Event{Ev: EvFatal, Err: err.Error()})
		return 2
	}
	cfg := w.cfg
	sigCtx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()
	ctx, cancel := context.WithCancel(sigCtx)
	defer cancel()

	if _, w.insert, err = execsSQL(cfg.Dialect, cfg.Prefix); err != nil {
		w.emit(Event{Ev: EvFatal, Err: err.Error()})
		return 2
	}
	if w.db, w.store, err = fleettest.OpenStore(ctx, cfg.Dialect, cfg.DSN, cfg.Prefix); err != nil {
		w.emit(Event{Ev: EvFatal, Err: err.Error()})
		return 2
	}
	defer w.db.Close()

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var changes <-chan struct{}
	if cfg.ListenJobs {
		if changes, err = postgres.ListenJobs(ctx, cfg.DSN, cfg.Prefix, logger.With(slog.String("component", "listen"))); err != nil {
			w.emit(Event{Ev: EvFatal, Err: err.Error()})
			return 2
		}
	}
	w.sched, err = scheduler.New(scheduler.Config{
		Store: w.store, Holder: cfg.Holder, Handler: w.handle,
		PollInterval: cfg.PollInterval, BatchSize: cfg.BatchSize,
		RefreshInterval: cfg.RefreshInterval, Changes: changes,
		Logger: logger.With(slog.String("component", "scheduler")),
	})
	if err != nil {
		w.emit(Event{Ev: EvFatal, Err: err.Error()})
		return 2
	}
	if cfg.Mode == ModeLeader {
		ec := cfg.Lease.Config(w.store, cfg.Holder)
		ec.OnStartedLeading = func(ctx context.Context, tok sqlease.Token) {
			w.emit(Event{Ev: EvStartedLeading, Epoch: tok.Epoch})
			err := w.sched.Lead(ctx, w.el, tok)
			ev := Event{Ev: EvLeadReturned, Epoch: tok.Epoch}
			if err != nil {
				ev.Err = err.Error()
			}
			w.emit(ev)
		}
		ec.OnStoppedLeading = func(tok sqlease.Token) {
			w.emit(Event{Ev: EvStoppedLeading, Epoch: tok.Epoch})
		}
		ec.Logger = logger.With(slog.String("component", "elector"))
		ec.Observer = observer{w: w}
		w.el, err = election.New(ec)
		if err != nil {
			w.emit(Event{Ev: EvFatal, Err: err.Error()})
			return 2
		}
	} else if cfg.Mode != ModeClaim {
		w.emit(Event{Ev: EvFatal, Err: fmt.Sprintf("unknown mode %q", cfg.Mode)})
		return 2
	}

	goCh := make(chan struct{})
	go fleettest.ReadCommands(goCh, cancel, func(cmd, arg string) { w.command(ctx, cmd, arg) })
	w.emit(Event{Ev: EvReady})
	select {
	case <-goCh:
	case <-ctx.Done():
	}
	// Like the daemon (internal/cli): dispatch on a context of its own;
	// on shutdown (optionally) drain the runs in flight, then stop the
	// dispatcher and the elector, which releases the lease.
	workCtx, stopWork := context.WithCancel(context.Background())
	defer stopWork()
	errCh := make(chan error, 1)
	go func() {
		if w.el != nil {
			errCh <- w.el.Run(workCtx)
		} else {
			errCh <- w.sched.Run(workCtx)
		}
	}()
	select {
	case <-ctx.Done():
	case err = <-errCh:
		w.emit(Event{Ev: EvFatal, Err: fmt.Sprintf("dispatcher returned before shutdown: %v", err)})
		return 2
	}
	if w.cfg.Drain {
		dctx, dcancel := context.WithTimeout(context.Background(), drainTimeout)
		if err := w.sched.Drain(dctx); err != nil {
			w.emit(Event{Ev: EvFatal, Err: fmt.Sprintf("drain: %v", err)})
		}
		dcancel()
		w.emit(Event{Ev: EvDrained})
	}
	stopWork()
	if err := <-errCh; err != nil {
		w.emit(Event{Ev: EvFatal, Err: err.Error()})
		return 2
	}
	w.emit(Event{Ev: EvExiting})
	return 0
}

// drainTimeout bounds the graceful shutdown's wait for runs in flight.
const drainTimeout = 10 * time.Second

// emit prints ev, stamped with the time, the holder and the pid.
func (w *worker) emit(ev Event) {
	if ev.T.IsZero() {
		ev.T = time.Now()
	}
	ev.Holder, ev.PID = w.cfg.Holder, os.Getpid()
	w.out.Print(ev)
}

// command runs one command read on stdin.
func (w *worker) command(ctx context.Context, cmd, arg string) {
	switch cmd {
	case CmdStatus:
		ev := Event{Ev: EvStatus}
		if w.el != nil {
			st := w.el.Status()
			ev.Leading, ev.Epoch = st.Leading, st.Token.Epoch
		}
		w.emit(ev)
	case CmdPause:
		w.pauseArmed.Store(true)
	case CmdUnpause:
		w.pauseArmed.Store(false)
	case CmdCreate:
		go w.create(ctx, arg)
	default:
		w.emit(Event{Ev: EvFatal, Err: fmt.Sprintf("unknown command %q", cmd)})
	}
}

func (w *worker) create(ctx context.Context, arg string) {
	var j sqlease.Job
	if err := json.Unmarshal([]byte(arg), &j); err != nil {
		w.emit(Event{Ev: EvCreated, Err: "decode job: " + err.Error()})
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, _, err := w.sched.Create(cctx, j)
	ev := Event{Ev: EvCreated, Job: j.Name, CreatedAt: got.CreatedAt, NextRunAt: got.NextRunAt}
	if err != nil {
		ev.Err = err.Error()
	}
	w.emit(ev)
}

func runEvent(ev string, r sqlease.Run) Event {
	return Event{Ev: ev, Epoch: r.Epoch, Job: r.Job, SF: FormatSF(r.ScheduledFor), Attempt: r.Attempt,
		RunHolder: r.Holder, Key: r.IdempotencyKey()}
}

// handle is the scheduler's handler: pass Ensure, report the execution,
// record it.
func (w *worker) handle(ctx context.Context, r sqlease.Run) error {
	if w.el != nil && w.pauseArmed.CompareAndSwap(true, false) {
		w.pauseAfterRenew(ctx, r)
	}
	if d := w.cfg.ExecJitter; d > 0 {
		select {
		case <-time.After(rand.N(d)):
		case <-ctx.Done():
		}
	}
	gateT := time.Now()
	if err := scheduler.Ensure(ctx); err != nil {
		ev := runEvent(EvExecRefused, r)
		ev.Err = err.Error()
		w.emit(ev)
		return err
	}
	ev := runEvent(EvExec, r)
	ev.GateT = gateT
	w.emit(ev)
	err := w.record(ctx, r)
	done := runEvent(EvExecDone, r)
	if err != nil {
		done.Err = err.Error()
	}
	w.emit(done)
	if err != nil {
		return err
	}
	if r.Job == w.cfg.SlowJob && r.Attempt == 1 {
		w.emit(runEvent(EvSleeping, r))
		select {
		case <-time.After(w.cfg.SlowFor):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// record writes the execution's row: in claim mode a plain insert, in leader
// mode an insert plus a ledger row inside the elector's fenced transaction
// for the run's lease epoch (how a user makes in-database effects
// exactly-once).
func (w *worker) record(ctx context.Context, r sqlease.Run) error {
	args := []any{r.Job, FormatSF(r.ScheduledFor), r.Attempt, r.Holder, r.Epoch, os.Getpid()}
	if w.el == nil {
		_, err := w.db.ExecContext(ctx, w.insert, args...)
		return err
	}
	tok := sqlease.Token{Name: w.cfg.LeaseName, Holder: r.Holder, Epoch: r.Epoch}
	return w.el.Fenced(ctx, tok, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, w.insert, args...); err != nil {
			return err
		}
		return ledger.Append(ctx, tx, w.cfg.Dialect, r.Holder, r.Epoch, fmt.Sprintf("%s#%d", r.IdempotencyKey(), r.Attempt))
	})
}

// pauseAfterRenew waits until the elector's next renew has completed, lets
// the observer SIGSTOP the process there, and returns once it is continued.
// At that point this handler has no transaction open and no renew is in
// flight, so the stopped process holds no database lock.
func (w *worker) pauseAfterRenew(ctx context.Context, r sqlease.Run) {
	req := pauseReq{run: r, done: make(chan struct{})}
	select {
	case w.pauseReq <- req:
	default:
		return
	}
	select {
	case <-req.done:
	case <-ctx.Done():
		select {
		case <-w.pauseReq: // withdraw the request; pause in a later term
			w.pauseArmed.Store(true)
			w.emit(runEvent(EvPauseWithdrawn, r))
		default:
			<-req.done // the observer took it: it is pausing now
		}
	}
}

// selfStop prints "pausing", stops the whole process with SIGSTOP and, once
// continued, prints "resumed".
func (w *worker) selfStop(r sqlease.Run) {
	w.emit(runEvent(EvPausing, r))
	// Signal this very thread: a process-directed SIGSTOP may be taken by
	// another thread, letting this one run on for a moment.
	runtime.LockOSThread()
	_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
	runtime.UnlockOSThread()
	w.emit(Event{Ev: EvResumed})
}

type observer struct {
	sqlease.NopObserver
	w *worker
}

func (o observer) Renewed(_ string, _ time.Duration, err error) {
	if err != nil {
		return
	}
	select {
	case req := <-o.w.pauseReq:
		o.w.selfStop(req.run)
		close(req.done)
	default:
	}
}
