// Package sqlease gives a fleet of service instances exactly one actor — one
// leader, one execution of each scheduled occurrence — using only the SQL
// database the fleet already runs.
//
// This root package holds the domain types every other package shares: the
// [Lease] row, the fencing [Token], the [LeaseStore] seam that each database
// dialect implements, the sentinel errors, the [Clock] and the [Observer]
// hooks. It imports only the standard library.
//
// # Guarantees
//
// G1 Single actor. For a lease name, at most one instance believes it is
// leader and acts at any instant. A leader stops acting at its own local
// deadline — measured on the monotonic clock from the moment its last
// successful renew was sent, minus a safety margin — which always falls before
// the lease can expire in database time. A process that was paused (GC,
// SIGSTOP) past that deadline does not act again without re-proving its lease.
//
// G2 Fencing. Every acquisition increments the lease epoch. Writes that must
// only happen under leadership run through [LeaseStore.Fenced], which verifies
// and locks the lease row (holder, epoch, unexpired in database time) inside
// the same transaction, so no other instance's acquire can commit in between.
// A fence that fails returns [ErrFenceFailed] (an [ErrLeaseLost]) and the
// elector drops leadership; an error of the fenced function's own writes,
// such as a job lock lost by one run, does not.
//
// G4 One clock. Every lease comparison is made in database time; host clocks
// may be skewed without breaking G1 or G2. The local monotonic clock is used
// only to decide when to stop trusting a lease, never to extend one.
//
// G5 Bounded failover. After a leader crash a follower acts within
// lease_duration + acquire_interval; a graceful shutdown releases the lease so
// a follower can take over at its next poll.
//
// What is not guaranteed: an effect outside the database (an HTTP call, a
// payment) made between the last gate check and a crash may be repeated by
// the next leader. Use the token's epoch and a stable idempotency key for
// such effects, and [LeaseStore.Fenced] for effects inside the database.
package sqlease
