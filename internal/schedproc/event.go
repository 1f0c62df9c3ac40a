// Package schedproc runs the scheduler (package scheduler) in real OS
// processes and checks SPEC §1 G3 and §4 from the outside: every occurrence
// (job, scheduled_for) executed exactly once — or retried, with the same
// idempotency key, only after its earlier attempt was recorded failed or
// abandoned — across racing claim-mode workers, a worker SIGKILLed inside a
// handler, a leader SIGKILLed mid-schedule and a leader SIGSTOPped past its
// lease.
//
// A worker is the test binary re-executing itself (TestMain calls WorkerMain
// when fleettest.IsWorker), configured by a JSON WorkerConfig in its
// environment. It runs a scheduler in claim mode (Scheduler.Run) or in leader
// mode (an election.Elector whose OnStartedLeading calls Scheduler.Lead, as
// the daemon does). Its handler passes scheduler.Ensure, prints an "exec"
// event, then records the execution in the plain table <prefix>_execs (no
// unique key, so duplicates stay visible) — in leader mode inside the
// elector's fenced transaction, together with a row of the action ledger
// (package internal/ledger). Every event is one JSON line on stdout.
//
// The test side (Fleet, the shared harness of internal/fleettest) starts
// workers, collects their events, sends commands on stdin and signals, waits
// with deadlines, and afterwards cross-checks events, the execs table and
// the scheduler's runs table (Analyze).
package schedproc

import (
	"fmt"
	"time"

	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/internal/ledger"
)

// Event kinds printed by a worker.
const (
	EvReady          = fleettest.EvReady // store open; waiting for "go"
	EvStartedLeading = "started_leading" // leader mode: OnStartedLeading (Epoch)
	EvStoppedLeading = "stopped_leading" // leader mode: OnStoppedLeading (Epoch)
	EvLeadReturned   = "lead_returned"   // leader mode: Scheduler.Lead returned (Epoch, Err)
	EvExec           = "exec"            // the handler passed Ensure and executes (job fields, GateT)
	EvExecDone       = "exec_done"       // the execution's record was written (Err if not)
	EvExecRefused    = "exec_refused"    // Ensure refused the handler (job fields, Err)
	EvSleeping       = "sleeping"        // the slow job's first attempt sleeps now
	EvPausing        = "pausing"         // about to SIGSTOP itself inside a handler (job fields)
	EvResumed        = "resumed"         // continued after the self-SIGSTOP
	EvPauseWithdrawn = "pause_withdrawn" // leadership ended before the pause: it stays armed
	EvCreated        = "created"         // answer to "create": the job as stored (Job, CreatedAt, NextRunAt, Err)
	EvStatus         = "status"          // answer to "status" (Leading, Epoch)
	EvDrained        = "drained"         // Scheduler.Drain returned (WorkerConfig.Drain)
	EvExiting        = "exiting"         // the dispatcher returned; exiting with status 0
	EvFatal          = fleettest.EvFatal // the worker could not run (Err)
)

// Commands a worker reads on stdin, one per line.
const (
	CmdGo     = fleettest.CmdGo // start dispatching
	CmdStatus = "status"        // print a status event
	// CmdPause (leader mode): the next handler call waits for the elector's
	// next successful renew, then SIGSTOPs the process before calling
	// Ensure — a point where no transaction is open.
	CmdPause = "pause"
	// CmdUnpause disarms CmdPause.
	CmdUnpause = "unpause"
	// CmdCreate + " " + JSON of a sqlease.Job: create it with
	// Scheduler.Create and print a created event.
	CmdCreate = "create"
)

// Event is one line of a worker's stdout.
type Event struct {
	Ev     string    `json:"ev"`
	Holder string    `json:"holder"`
	PID    int       `json:"pid"`
	T      time.Time `json:"t"` // worker's wall clock when the event happened

	// Epoch: the lease epoch (leader events) or the run's fencing epoch
	// (execution events: lease epoch in leader mode, lock epoch in claim mode).
	Epoch int64 `json:"epoch,omitempty"`

	// Execution fields: the run handed to the handler.
	Job       string `json:"job,omitempty"`
	SF        string `json:"sf,omitempty"` // scheduled_for, RFC 3339 UTC
	Attempt   int    `json:"attempt,omitempty"`
	RunHolder string `json:"run_holder,omitempty"` // Run.Holder
	Key       string `json:"key,omitempty"`        // Run.IdempotencyKey()
	// GateT is the worker's wall clock just before the Ensure that let the
	// execution through.
	GateT time.Time `json:"gate_t,omitzero"`

	Err     string `json:"err,omitempty"`
	Leading bool   `json:"leading,omitempty"`

	// Created job (database times).
	CreatedAt time.Time `json:"created_at,omitzero"`
	NextRunAt time.Time `json:"next_run_at,omitzero"`

	// Filled in by the Fleet: Proc, Recv, Index.
	fleettest.Meta
}

// Occ returns the event's occurrence.
func (e Event) Occ() Occurrence { return Occurrence{Job: e.Job, SF: e.SF} }

func (e Event) String() string {
	s := fmt.Sprintf("%s %s[%d] %s", e.T.Format("15:04:05.000"), e.Holder, e.Proc, e.Ev)
	if e.Epoch != 0 {
		s += fmt.Sprintf(" epoch=%d", e.Epoch)
	}
	if e.Job != "" {
		s += fmt.Sprintf(" %s@%s#%d", e.Job, e.SF, e.Attempt)
	}
	if e.Ev == EvStatus {
		s += fmt.Sprintf(" leading=%v", e.Leading)
	}
	if !e.CreatedAt.IsZero() {
		s += fmt.Sprintf(" created_at=%s next_run_at=%s", e.CreatedAt.Format(time.RFC3339Nano), e.NextRunAt.Format(time.RFC3339Nano))
	}
	if e.Err != "" {
		s += fmt.Sprintf(" err=%q", e.Err)
	}
	return s
}

// Occurrence is one (job, scheduled_for): internal/ledger's.
type Occurrence = ledger.Occurrence

// FormatSF is how scheduled_for times are keyed (ledger.FormatSF).
func FormatSF(t time.Time) string { return ledger.FormatSF(t) }
