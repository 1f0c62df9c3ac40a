// Package election elects one leader per lease name among any number of
// instances sharing a database, and is the acting gate every leader-only
// action passes through.
//
// # How it works
//
// An Elector starts as a follower. It reads the lease row; while another
// holder's lease is unexpired (in database time) it waits — the acquire
// interval, or less when the database says the lease expires sooner — and
// reads again. When the row is missing or expired it tries to acquire it in
// one conditional statement; exactly one contender wins and the epoch goes up.
//
// The leader renews every RenewInterval. It trusts its lease only until
//
//	trustedUntil = sentAt + LeaseDuration - SafetyMargin
//
// where sentAt is read on the local monotonic clock before the renew is sent.
// The database computed expires_at = db_now + LeaseDuration with db_now no
// earlier than sentAt, so the local deadline always falls before the lease can
// expire in database time, however skewed the host clock is. Each renew is
// given that deadline, so a slow database cannot stretch trust.
//
// # The acting gate
//
// Require returns the token only while this instance leads and its local
// deadline has not passed — checked in memory, with no database round trip,
// so a process resumed from SIGSTOP or a long GC pause after its deadline is
// refused at once. Ensure re-checks a token just before an irreversible step.
// Fenced runs database writes in a transaction that verifies and locks the
// lease row (holder, epoch, unexpired in database time), so writes from a
// stale leader never commit; a failed fence closes the gate at once.
//
// # Advisory mode
//
// With Config.SessionLocker, followers also wait on a database session lock
// held by the leader's dedicated connection; when the database sees that
// session end (crash, shutdown, terminated backend) the lock passes to a
// waiting follower, which takes the lease over at once with epoch + 1. The
// lock is only the fast path: a leader that is frozen or cut off keeps its
// session, so a follower also acquires the lease once it has been expired
// for AcquireInterval — within LeaseDuration + AcquireInterval, as in lease
// mode. The frozen leader's gate closed at its local deadline, and the new
// epoch fences its writes when it wakes.
//
// A takeover through the lock does not wait for the previous lease to
// expire, so its holder may still be inside an external call it started
// before its session died (a database restart ends sessions of live
// processes). PriorTermsEnd tells when that can no longer be: work
// interrupted under an earlier term must not be retried before it (the
// scheduler defers such retries; new work is not delayed).
//
// # Leading means working
//
// Resign gives a term up as a shutdown does (the lease is released) and
// keeps the instance a follower for ResignHoldoff, so that another instance
// leads: scheduler.Lead calls it when its dispatcher cannot run.
//
// # Failure cases
//
//   - Renew fails (no row, SQL error, timeout): leadership is dropped at once.
//   - Deadline passes without a successful renew (pause, slow database): the
//     gate closes and the leading context is cancelled.
//   - Fence fails: the gate closes and leadership is dropped.
//   - Advisory mode, the leader frozen or partitioned past its lease: a
//     follower acquires the expired lease without the lock and leads on it
//     alone. When the old session finally ends, that follower keeps its
//     term: if its own Lock comes first it renews through that session from
//     then on; if another follower's does, that one leaves the live term to
//     expire rather than deposing it (the lease row records which terms
//     hold the lock), so two gates are never open at once.
//   - Advisory mode, an acquire answered late (more than two renew
//     intervals after it was sent, on a loaded machine): the term begins
//     with its gate closed, which the first renew opens. OnStartedLeading
//     has been called all the same; callers wait for the gate within the
//     term rather than give the term up (scheduler.Lead, the singletons).
//   - Context ends: the gate closes, the OnStartedLeading callback is waited
//     for (at most until the local deadline), then the lease is released so a
//     follower takes over at its next poll.
//
// What it cannot do: stop an external effect already under way when
// leadership is lost. Check Ensure immediately before such an effect and make
// it idempotent with the token's epoch or a stable key.
package election
