// Package sqlserver is the SQL Server and Azure SQL dialect of sqlease, on
// github.com/microsoft/go-mssqldb through database/sql. Database time is
// SYSUTCDATETIME(), read once per statement through a derived table, and
// every time column is datetime2(7). Lease names, holder ids, job names and
// client keys are compared exactly (a binary collation), as on PostgreSQL.
//
// # What was verified, and where
//
// The T-SQL in this package has been checked statically only: its tests,
// which need no server, check that every statement exists, uses exactly the
// placeholders @p1…@pN of its documented argument list, names the prefix's
// tables and no others, and that the migrations are guarded to run twice;
// they also cover connection-string handling and error classification with
// synthetic driver errors. None of these statements has been executed
// against SQL Server or Azure SQL in this repository's CI, which has no
// server. The lease conformance suite (package storetest), a run of every
// job statement through the store, a second migration and the benchmarks
// run against a real server only when SQLEASE_TEST_SQLSERVER_DSN names one,
// e.g.
//
//	SQLEASE_TEST_SQLSERVER_DSN='sqlserver://sa:…@127.0.0.1:1433?database=sqlease_test' go test ./sqlserver/
//
// Until someone has done that, treat the locking arguments below as design,
// not as tested fact.
//
// # Leases
//
// Acquire is one MERGE under WITH (UPDLOCK, HOLDLOCK): a serializable read
// of the lease row, or of the key range where it would go, with update
// locks held until the statement writes. Concurrent acquirers of one name
// queue on that lock; the first finds the row missing or expired and takes
// it, the others then find it held. Renew and Release are UPDATEs under the
// same hints, conditional on holder, epoch and expires_at > now, so an
// acquire (expires_at <= now) and a renew are mutually exclusive in
// database time and serialized on the row's lock.
//
// Fenced takes a shared lock on the lease row held to commit
// (REPEATABLEREAD), which an acquire's or renew's update lock can share but
// not turn into the exclusive lock its write needs: no acquire can commit
// while a fenced transaction is open, and the fence checks the lease again
// just before commit. Keep fenced transactions short; a long one also
// delays the holder's own renewal.
//
// Unlike PostgreSQL, SQL Server cannot end a transaction that sits idle:
// it has no idle-in-transaction timeout, and SET LOCK_TIMEOUT only bounds
// how long a waiter waits. A holder frozen (SIGSTOP, VM pause) inside a
// fenced transaction therefore keeps every acquirer of its lease waiting
// until it resumes — its final check then fails and it rolls back — or
// until its connection dies: the server notices a dead client through TCP
// keepalive, and an operator can KILL the session. The dialect therefore
// leaves sqlstore's FenceLimit empty and sets no FenceExpired, and the
// storetest harness declares AbortsFrozenFence false.
//
// Lease and Leases read without locks (READUNCOMMITTED) so that they never
// queue behind an acquire waiting on a fenced transaction; they may observe
// an acquire, renew or release a moment before it commits. Every decision
// is re-checked under lock by Acquire, Renew or Fenced.
//
// # Jobs
//
// ClaimDue is the queue idiom: a TOP (@p2) CTE reads due jobs ordered by
// next_run_at WITH (UPDLOCK, READPAST, ROWLOCK), skipping rows another
// claimer holds, and an UPDATE of those rows returns them through OUTPUT.
// Every statement that returns rows does so with OUTPUT in the same
// statement, so the tables must not have triggers (SQL Server refuses
// OUTPUT without INTO on a table with enabled triggers). The job indexes
// are filtered, which needs the ANSI options the driver sets on every
// connection (QUOTED_IDENTIFIER, ANSI_NULLS, …); run the printed schema
// with sqlcmd -I.
//
// # Durations
//
// Durations travel as milliseconds and are added with DATEADD, whose
// number is an int: whole seconds and the remaining milliseconds are added
// separately, so up to [MaxDuration] (about 68 years) works, not just the
// 24.8 days of milliseconds an int holds.
//
// # Connecting
//
// [Open] takes the connection string forms the driver reads. For Azure SQL
// without a stored password, add fedauth=ActiveDirectoryDefault (or use
// [WithEntraID]): the pool then signs in with Azure's default credential
// chain — managed identity in Azure, the Azure CLI's login on a developer's
// machine. [HasPassword] tells whether a string carries a credential and
// [Redact] hides credentials for logs. READ_COMMITTED_SNAPSHOT (Azure SQL's
// default) is recommended: job reads then never wait for a writer.
package sqlserver
