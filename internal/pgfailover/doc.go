// Package pgfailover checks sqlease's leases across the failover of a
// PostgreSQL primary to an asynchronous streaming replica that lacks the
// primary's last writes (issue 31; postgres/timeline.go). It holds only
// tests, which start their own servers through internal/pgtest:
//
//	go test ./internal/pgfailover/
//	    TestAsyncFailover: electors churn leadership on a primary with a
//	    streaming replica, through a multi-host connection string
//	    (target_session_attrs=read-write); the replication is cut, more
//	    terms are handed out on the primary alone, the primary is killed
//	    (SIGKILL, with its backends) right after a new term began, and the
//	    replica is promoted. Then no epoch may have been told to two terms,
//	    the first epoch after the failover must be above every epoch told
//	    before it (also the ones the replica never received), and no two
//	    terms may have acted at once, a lost term counting until its local
//	    deadline (Elector.ActUntil). Run in lease mode and in advisory
//	    mode (leadership through the session lock and the takeover), about
//	    6 s each.
//
// The fault is the database's, so the electors are goroutines of the test
// process, each with its own connection pool, against the real servers.
package pgfailover
