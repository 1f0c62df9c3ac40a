// Package faults holds the fault suites: three real "sqlease serve" nodes
// (lease 2 s, renew 500 ms, acquire 200 ms), each election mode on each
// database it runs on, and one fault per trial — SIGKILL of the leader,
// SIGSTOP of the leader for 2.5 × lease, an immediate restart of the
// database server, the termination of every backend of the nodes, a fault
// during the new leader's schedule rebuild (the jobs table locked until the
// backends are terminated under the waiting load), and the leader cut off
// from the database for 2.5 × lease while it lives (a proxy per node; the
// proxy closes both sides, so the database sees the leader's sessions end).
// Each database also runs the faults with every node claiming due jobs
// (mode lease+claim, --dispatch claim): the victim is then the worker
// running the slow job's request, its failover another node's run of that
// occurrence (bound: lease + poll interval + margin), and the ledger is
// checked per job, a claim being an epoch of its job. And each election
// mode runs the process faults (all but the rebuild) against the node
// running a bash singleton (singleton_test.go): it must move within the
// failover bound, no save may be accepted under an epoch after a newer
// one nor the count go back, two copies never run at once (a frozen
// node's is killed by its guard at its acting deadline), and exactly one
// runs in the end.
//
// The fleet runs a 1 s run_all job and a 2 s job whose receiver answers
// after 1.5 s, and one-off jobs submitted at 5/s to random live nodes. A
// real HTTP receiver (fleettest.Receiver) records every delivery; each
// trial then checks that
//
//   - the failover stays within its bound (lease mode: lease + acquire
//     interval + margin; advisory mode after a crash: under a second; a
//     frozen or cut-off leader: as in lease mode);
//   - the fleet keeps dispatching: a one-off job submitted after the fault
//     runs within the bound (a leader that renews but dispatches nothing
//     fails here);
//   - nothing is lost: every accepted one-off job ran, every occurrence of
//     the run_all job in the trial ran, and the occurrence in flight at the
//     fault was eventually answered;
//   - no two deliveries of one occurrence overlapped while the first sender
//     was alive (a SIGKILLed sender's delivery counts until the kill);
//   - the deliveries, read as an action ledger, pass internal/ledger's
//     invariant checker (one holder per epoch, no send under an epoch after
//     a newer one had begun sending) against the lease row.
//
// SQLEASE_FAULT_TRIALS (default 1) sets the trials per fault, mode and
// database; SQLEASE_FAULT_RACE=1 builds the nodes with the race detector.
// PostgreSQL and MariaDB run on private servers the suites start (pgtest,
// mysqltest.Start), since a trial restarts its server.
package faults
