// Package hafailover tests sqlease across a failover of a highly available
// PostgreSQL (SPEC G7, issue 31): three real "sqlease serve" processes on
// the multi-host DSN of an internal/hacluster Patroni cluster
// (target_session_attrs=read-write), leadership churning (the leader gets
// SIGTERM and a fresh node replaces it, over and over) and one-off jobs
// submitted continuously, while the primary's host is killed (Patroni and
// PostgreSQL, kill -9) and Patroni promotes the replica.
//
//   - Synchronous mode: no epoch issued twice, none going backwards across
//     the failover, every job the API accepted (2xx) exists afterwards and
//     ran, no occurrence delivered twice under one attempt.
//   - Asynchronous mode, replication cut before the kill (the promoted
//     replica lacks the primary's last writes): epochs still only grow and
//     no two holders share one; the durability detection said asynchronous
//     before the failover. Accepted jobs may be lost here — that is what
//     asynchronous replication means — and the test logs how many.
//
// With SQLEASE_HA_FIGURES=1, TestHAFigures measures the time from the
// primary's death to a node acting again, and what synchronous replication
// costs a renew and a claim.
//
// The tests need Patroni, etcd and PostgreSQL 15 (scripts/test.sh installs
// the Debian packages patroni and etcd-server as root when missing); they
// skip, saying why, when these are missing or SQLEASE_TEST_HA=0.
package hafailover
