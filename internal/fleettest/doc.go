// Package fleettest runs fleets of real sqlease processes for tests and
// injects faults into them: the one real-process harness of the repository.
//
// Two kinds of fleet:
//
//   - Fleet: workers — the test binary re-executed with an environment that
//     makes its TestMain run a worker (internal/multiproc, internal/schedproc).
//     Workers configures each worker with a package's WorkerConfig (JSON);
//     the worker side is IsWorker, ReadConfig, OpenStore, Out and
//     ReadCommands. Their election is a Lease (FastLease: the timings
//     every worker fleet runs, and its failover bound); the database they
//     share with the test, migrated with the action ledger, a Backend.
//     A worker prints one JSON event per line on stdout (fields ev, holder,
//     t, err at least; the package's event type embeds Meta) and reads
//     commands on stdin; the fleet keeps the event log and waits on it with
//     deadlines (Wait, WaitCount, TryWait).
//   - Daemons: "sqlease serve" processes built by BuildDaemon, with JSON logs
//     on stderr (Node.Log, TryWaitLogFrom) and their HTTP API (Node.Do,
//     Readyz): internal/e2e, internal/faults, internal/failover,
//     internal/hafailover.
//
// Faults: every process (Proc) takes SIGKILL (Kill, remembering when:
// KilledAt), SIGSTOP/SIGCONT (Stop, Cont, WaitStopped) and SIGTERM (Term).
// The database faults are TerminateBackends (pg_terminate_backend, or KILL
// CONNECTION on MySQL/MariaDB, of every session on the test's database but
// the caller's), BlockJobs (hold a lock on the jobs table until released:
// makes a schedule load wait, deterministically, for a fault to hit it),
// the restart of a private PostgreSQL server (pgtest.Server.Restart) and
// Proxy (an in-process toxiproxy in front of the database, to cut every
// connection).
//
// Checks: Receiver is an HTTP action endpoint that records each delivery
// (idempotency key, epoch, holder, start and end) and finds overlapping
// deliveries of one occurrence; Ledger turns deliveries into action-ledger
// rows for internal/ledger's invariant checker. Workers and nodes are
// checked for data races, panics and unclean exits (Fleet.CheckWorkers and
// the Daemons cleanup).
//
// Log is the one append-only list a test waits on with a deadline (a
// fleet's events, a node's log lines, the requests an endpoint received);
// Timings collects what a suite measures, for TestMain to print once the
// tests, which run in parallel, have ended.
package fleettest
