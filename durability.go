package sqlease

import "fmt"

// DurabilityMode says whether a commit the database acknowledged to sqlease
// would survive the loss of the database's host (SPEC G7).
type DurabilityMode string

const (
	// DurabilitySingle: the database knows of no standby. A commit is on this
	// server alone; losing the host loses it (and, with a standby promoted
	// from a backup or an earlier snapshot, every commit since).
	DurabilitySingle DurabilityMode = "single"
	// DurabilitySynchronous: a commit is acknowledged only once at least one
	// standby has it (PostgreSQL synchronous_standby_names with
	// synchronous_commit on, MariaDB semi-synchronous replication switched
	// on, SQL Server synchronous-commit replicas that are synchronized). A
	// failover to such a standby keeps every 2xx. Writes may stall while no
	// synchronous standby answers.
	DurabilitySynchronous DurabilityMode = "synchronous"
	// DurabilityAsynchronous: standbys exist (or are expected) but a commit
	// is acknowledged before any has it. A failover may promote a standby
	// that lacks the last commits: 2xx answers can be lost, and without the
	// epoch's failover fencing (PostgreSQL's timeline) epochs could repeat.
	DurabilityAsynchronous DurabilityMode = "asynchronous"
	// DurabilityUnknown: what the database replicates could not be read
	// (missing privileges, a server kind sqlease cannot ask); Detail says why.
	DurabilityUnknown DurabilityMode = "unknown"
)

// Durability is how the database replicates the commits of sqlease's
// sessions, as far as the serving role may read it: the answer of the
// dialects' ReadReplication functions (postgres, mysql, sqlserver).
type Durability struct {
	// Mode is the verdict.
	Mode DurabilityMode
	// Sync is the number of standbys connected that acknowledge commits
	// before the client hears of them; Async the number connected that do
	// not. Both are 0 when they cannot be read (Detail then says so).
	Sync, Async int
	// Detail says, in a sentence for operators, what the verdict rests on:
	// the settings read and what could not be read.
	Detail string
}

// Synchronous reports whether an acknowledged commit is already on a standby.
func (d Durability) Synchronous() bool { return d.Mode == DurabilitySynchronous }

// String is one line of key=value pairs for /readyz and logs, e.g.
// "durability=asynchronous standbys=1 sync_standbys=0"; standbys counts
// every connected standby, synchronous or not.
func (d Durability) String() string {
	mode := d.Mode
	if mode == "" {
		mode = DurabilityUnknown
	}
	return fmt.Sprintf("durability=%s standbys=%d sync_standbys=%d", mode, d.Sync+d.Async, d.Sync)
}
