// Package failover measures, with real `sqlease serve` processes on a private
// PostgreSQL server, how fast the fleet gets a new actor after its leader is
// killed or stopped, and what an idle fleet costs the database. It holds
// only tests:
//
//	go test ./internal/failover/
//	    TestAdvisoryFailover: advisory mode, kill -9 then SIGTERM of the
//	    acting leader; another node must act within 2 s (a lease-expiry
//	    takeover would take ≥ 4 s), and no action of an older epoch may
//	    arrive after a newer one's.
//	    TestAdvisoryIdleCost: three idle advisory nodes must cost ≤ 5
//	    statements/s, the followers ≤ 1/s (they must not poll).
//
//	SQLEASE_FAILOVER_FIGURES=1 go test ./internal/failover/ -run TestFigures -v -timeout 30m
//	    The figures (≈ 5 minutes): each handoff repeated
//	    SQLEASE_FAILOVER_REPS times (default 9), printed as tables of
//	    median (min–max) with a breakdown; idle cost over
//	    SQLEASE_FAILOVER_IDLE_WINDOW (default 30s) with a breakdown by
//	    statement. Subsets: -run 'TestFigures/^advisory' and the like.
//
// Every node is a `sqlease serve` process built once per test binary (with
// -race when the test has it), or the binary named by SQLEASE_FAILOVER_BIN,
// run with --log-format json, so that the elector's leader_acquired and the
// scheduler's schedule_rebuilt are read from its stderr with their
// timestamps. Jobs are HTTP actions aimed at a server inside the test, which
// records the arrival time and the Sqlease-Epoch, Sqlease-Holder and
// Sqlease-Scheduled-For headers of every request: "another node acts" is the
// first request carrying a higher epoch than the signalled leader's.
//
// The scheduler refuses intervals below scheduler.MinEvery (100 ms), so the
// action stream is made of five every-100ms jobs created at staggered
// phases: one action due every 20 ms.
//
// Timings depend on the machine being otherwise idle: on a loaded machine
// every wake-up in the chain (the database noticing the dead session, the
// follower's process, the new leader's first claim) waits for a CPU.
// TestFigures prints the load average at its start and end.
package failover
