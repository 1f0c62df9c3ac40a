// Package multiproc runs sqlease electors in real OS processes and checks the
// guarantees of SPEC §1–2 from the outside: one leader, bounded failover,
// closed gates for followers and for paused or fenced-out leaders, and a
// database fence that rejects stale writes on its own.
//
// A worker is the test binary re-executing itself: the package's TestMain
// calls WorkerMain when fleettest.IsWorker. The worker opens the store named by
// its environment, runs an election.Elector and, while leading, acts every
// ActInterval: it passes the gate (Require), then appends a row to the
// action ledger (package internal/ledger) inside Elector.Fenced. It reports
// everything it does as JSON lines (Event) on stdout, one write per line.
//
// The test side (Fleet) starts workers, collects their events, sends them
// commands on stdin and signals (SIGKILL, SIGSTOP/SIGCONT, SIGTERM), waits
// for events with deadlines, and afterwards cross-checks the events with the
// ledger (Verify).
package multiproc

import (
	"fmt"
	"time"

	"github.com/sqlease/sqlease/internal/fleettest"
)

// Event kinds printed by a worker.
const (
	EvReady          = fleettest.EvReady // store open; waiting for the "go" command
	EvStartedLeading = "started_leading" // OnStartedLeading (Epoch)
	EvStoppedLeading = "stopped_leading" // OnStoppedLeading (Epoch)
	EvNewLeader      = "new_leader"      // OnNewLeader (Leader, Epoch)
	EvActed          = "acted"           // the gate let the worker act (Epoch, Seq, GateT)
	EvFencedOK       = "fenced_ok"       // the fenced ledger write committed (Epoch, Seq)
	EvFencedFailed   = "fenced_failed"   // the fenced ledger write failed (Epoch, Seq, Err)
	EvGateRefused    = "gate_refused"    // Require refused (Epoch of the term, Err)
	EvStatus         = "status"          // answer to the "status" command
	EvPausing        = "pausing"         // about to SIGSTOP itself (InTx, Seq)
	EvResumed        = "resumed"         // continued after the self-SIGSTOP
	EvProbeStats     = "probe_stats"     // the probe's refusal count, at exit
	EvExiting        = "exiting"         // Run returned; exiting with status 0
	EvFatal          = fleettest.EvFatal // the worker could not run (Err)
)

// Commands a worker reads on stdin, one per line.
const (
	CmdGo        = fleettest.CmdGo // start the elector
	CmdStatus    = "status"        // print a status event
	CmdPause     = "pause"         // leader: SIGSTOP itself right after its next renew, between two actions
	CmdPauseInTx = "pause_in_tx"   // leader: SIGSTOP itself inside its next fenced transaction
)

// Event is one line of a worker's stdout.
type Event struct {
	Ev     string    `json:"ev"`
	Holder string    `json:"holder"`
	PID    int       `json:"pid"`
	T      time.Time `json:"t"` // worker's clock when the event happened

	Epoch int64 `json:"epoch,omitempty"`
	// Seq numbers a worker's actions; the ledger note of action Seq is
	// Note(Holder, Seq, Kind).
	Seq int64 `json:"seq,omitempty"`
	// GateT is the worker's clock just before the Require call that let an
	// action through.
	GateT time.Time `json:"gate_t,omitzero"`
	// Kind of actor: "" (the leader's acting loop), "bypass" (stale token
	// straight to the store), "probe" (gate probe that runs on followers too).
	Actor string `json:"actor,omitempty"`

	Err       string `json:"err,omitempty"`
	LeaseLost bool   `json:"lease_lost,omitempty"` // errors.Is(err, ErrLeaseLost)
	NotLeader bool   `json:"not_leader,omitempty"` // errors.Is(err, ErrNotLeader)
	InTx      bool   `json:"in_tx,omitempty"`

	// Status fields.
	Leading      bool   `json:"leading,omitempty"`
	Leader       string `json:"leader,omitempty"`
	LeaderEpoch  int64  `json:"leader_epoch,omitempty"`
	LeaderKnown  bool   `json:"leader_known,omitempty"`
	ProbeRefused int64  `json:"probe_refused,omitempty"`

	// Filled in by the Fleet: Proc, Recv, Index.
	fleettest.Meta
}

func (e Event) String() string {
	s := fmt.Sprintf("%s %s[%d] %s", e.T.Format("15:04:05.000"), e.Holder, e.Proc, e.Ev)
	if e.Actor != "" {
		s += " actor=" + e.Actor
	}
	if e.Epoch != 0 {
		s += fmt.Sprintf(" epoch=%d", e.Epoch)
	}
	if e.Seq != 0 {
		s += fmt.Sprintf(" seq=%d", e.Seq)
	}
	if e.Ev == EvStatus {
		s += fmt.Sprintf(" leading=%v leader=%s@%d known=%v", e.Leading, e.Leader, e.LeaderEpoch, e.LeaderKnown)
	}
	if e.InTx {
		s += " in_tx"
	}
	if e.Err != "" {
		s += fmt.Sprintf(" lease_lost=%v not_leader=%v err=%q", e.LeaseLost, e.NotLeader, e.Err)
	}
	return s
}

// Note is the ledger note of an action: holder, actor kind and sequence
// number, so that ledger rows and events can be matched.
func Note(holder, actor string, seq int64) string {
	if actor == "" {
		actor = "act"
	}
	return fmt.Sprintf("%s/%s/%d", holder, actor, seq)
}
