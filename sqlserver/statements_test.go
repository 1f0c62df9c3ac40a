package sqlserver_test

import (
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/sqlease/sqlease/sqlserver"
	"github.com/sqlease/sqlease/sqlstore"
)

// These tests check the T-SQL text without a server: every statement is
// there, takes exactly the documented placeholders, touches only the
// prefix's tables, reads the clock once, and carries the lock hints its
// correctness argument (doc.go) rests on.

// prefix is unlike any word of T-SQL, so that its occurrences are exactly
// the places it was substituted.
const prefix = "qqzp"

const (
	leases     = prefix + "_leases"
	jobs       = prefix + "_jobs"
	runs       = prefix + "_runs"
	singletons = prefix + "_singletons"
	output     = prefix + "_run_output"
	checkpoint = prefix + "_run_checkpoints"
	revoked    = prefix + "_revoked_sessions"
	occ        = prefix + "_occurrences"
)

// stmt is what sqlstore documents for one statement: its argument count and
// the tables it touches.
type stmt struct {
	args   int
	tables []string
}

// documented lists every statement field of sqlstore.Queries ("Queries.")
// and sqlstore.JobQueries ("Jobs.") with its documented argument list.
var documented = map[string]stmt{
	"Queries.Acquire":       {3, []string{leases}}, // (name, holder, ttl_ms)
	"Queries.MigrateLock":   {0, []string{leases}}, // (): a session application lock named after the table
	"Queries.MigrateUnlock": {0, []string{leases}},
	"Queries.Renew":         {4, []string{leases}}, // (name, holder, epoch, ttl_ms)
	"Queries.Release":       {3, []string{leases}}, // (name, holder, epoch)
	"Queries.Get":           {1, []string{leases}}, // (name)
	"Queries.List":          {0, []string{leases}}, // ()
	"Queries.FenceLock":     {3, []string{leases}}, // (name, holder, epoch)
	"Queries.FenceCheck":    {3, []string{leases}}, // (name, holder, epoch)

	"Singletons.Ensure":    {1, []string{singletons}}, // (name)
	"Singletons.Get":       {1, []string{singletons}}, // (name)
	"Singletons.List":      {0, []string{singletons}}, // ()
	"Singletons.Page":      {2, []string{singletons}}, // (after, limit)
	"Singletons.Start":     {3, []string{singletons}}, // (holder, epoch, name)
	"Singletons.Save":      {4, []string{singletons}}, // (state, name, holder, epoch)
	"Singletons.Heartbeat": {3, []string{singletons}}, // (name, holder, epoch)
	"Singletons.Fail":      {5, []string{singletons}}, // (last_error, quick, name, holder, epoch)
	"Singletons.Create":    {3, []string{singletons}}, // (name, spec, spec_hash)
	"Singletons.SetPaused": {2, []string{singletons}}, // (paused, name)
	"Singletons.Delete":    {1, []string{singletons}}, // (name)

	"Singletons.Place":             {4, []string{singletons, leases}}, // (holder, node_epoch, names JSON, limit)
	"Singletons.Give":              {4, []string{singletons, leases}}, // (to, holder, node_epoch, names JSON)
	"Singletons.Assigned":          {2, []string{singletons}},         // (holder, node_epoch)
	"Singletons.Placement":         {0, []string{singletons, leases}}, // ()
	"Singletons.StartAssigned":     {5, []string{singletons, leases}}, // (holder, generation, name, holder, generation)
	"Singletons.SaveAssigned":      {4, []string{singletons, leases}}, // (state, name, holder, generation)
	"Singletons.HeartbeatAssigned": {3, []string{singletons, leases}}, // (name, holder, generation)
	"Singletons.FailAssigned":      {5, []string{singletons, leases}}, // (last_error, quick, name, holder, generation)

	"Jobs.AbandonDeleted": {1, []string{runs}},       // (job_id)
	"Jobs.RunsBefore":     {4, []string{jobs, runs}}, // (job_name, scheduled_for, attempt, limit)
	"Jobs.Now":            {0, nil},
	"Jobs.InsertJob":      {14, []string{jobs}},
	"Jobs.JobByName":      {1, []string{jobs}},
	"Jobs.JobByKey":       {1, []string{jobs}},
	"Jobs.ListJobs":       {2, []string{jobs}},
	"Jobs.DeleteJob":      {1, []string{jobs}},
	"Jobs.SetPaused":      {3, []string{jobs}},
	"Jobs.PauseLike":      {3, []string{jobs}}, // (paused, pause_reason, name_pattern)
	"Jobs.SetBreaker":     {6, []string{jobs}}, // (breaker_count, open, changed, id, holder, lock_epoch)
	"Jobs.Trigger":        {1, []string{jobs}},
	"Jobs.ClaimDue":       {3, []string{jobs, leases}}, // (holder, limit, worker_epoch); a worker's claim is reclaimable when its worker lease has expired
	"Jobs.ClaimJob":       {3, []string{jobs}},
	"Jobs.AbandonRunning": {1, []string{runs, jobs}},
	"Jobs.StartJob":       {5, []string{jobs}},
	"Jobs.InsertRun":      {6, []string{runs}},
	"Jobs.Heartbeat":      {3, []string{jobs}},
	"Jobs.OwnClaims":      {2, []string{jobs}},
	"Jobs.FinishRun":      {5, []string{runs}},
	"Jobs.ReleaseJob":     {6, []string{jobs}},
	"Jobs.Runs":           {2, []string{jobs, runs}},
	"Jobs.Stats":          {0, []string{jobs}},
	"Jobs.PruneRuns":      {1, []string{runs}},
	"Jobs.DueWindow":      {2, []string{jobs}},
	"Jobs.Changed":        {4, []string{jobs}},

	"Output.Insert":    {4, []string{output}}, // (job_id, scheduled_for, attempt, output)
	"Output.Between":   {3, []string{output}}, // (job_id, oldest, newest scheduled_for)
	"Output.DeleteJob": {1, []string{output}}, // (job_id)
	"Output.Prune":     {1, []string{output}}, // (older_than_ms)

	"Checkpoints.Save":      {4, []string{checkpoint}}, // (job_id, scheduled_for, attempt, checkpoint)
	"Checkpoints.Latest":    {3, []string{checkpoint}}, // (job_id, scheduled_for, attempt)
	"Checkpoints.Between":   {3, []string{checkpoint}}, // (job_id, oldest, newest scheduled_for)
	"Checkpoints.DeleteJob": {1, []string{checkpoint}}, // (job_id)
	"Checkpoints.Prune":     {1, []string{checkpoint}}, // (older_than_ms)

	"Occurrences.Insert":         {7, []string{occ}},               // (job_id, job_name, scheduled_for, holder, lock_epoch, le, max_concurrent)
	"Occurrences.Candidates":     {2, []string{occ, jobs, leases}}, // (le, limit)
	"Occurrences.Claim":          {5, []string{occ, jobs, leases}}, // (holder, le, job_id, scheduled_for, lock_epoch)
	"Occurrences.Read":           {2, []string{occ}},               // (job_id, scheduled_for)
	"Occurrences.Start":          {5, []string{occ}},               // (attempt, lock…)
	"Occurrences.AbandonRunning": {2, []string{runs}},              // (job_id, scheduled_for)
	"Occurrences.Heartbeat":      {4, []string{occ}},               // (lock…)
	"Occurrences.Release":        {6, []string{occ}},               // (attempt, backoff_ms, lock…)
	"Occurrences.Delete":         {4, []string{occ}},               // (lock…)
	"Occurrences.DeleteJob":      {1, []string{occ}},               // (job_id)
	"Occurrences.SetBreaker":     {4, []string{jobs}},              // (breaker_count, open, changed, job_id)
	"Occurrences.Count":          {1, []string{occ}},               // (job_id)

	"Revoked.Insert": {2, []string{revoked}}, // (id, ttl_ms)
	"Revoked.Check":  {1, []string{revoked}}, // (id)
	"Revoked.Prune":  {0, []string{revoked}}, // ()
}

// empty lists the statement fields SQL Server must leave empty, and why:
// the store switches to them when they are set. A field sqlstore adds must
// be entered here or in documented, so that no dialect forgets it silently.
var empty = map[string]string{
	"Queries.FenceLimit":        "SQL Server has no setting that ends a transaction left idle (doc.go)",
	"Queries.FenceLimitReset":   "no FenceLimit, nothing to reset",
	"Jobs.StartRunOne":          "StartRun's transaction of three statements is used",
	"Jobs.FinishRunOne":         "FinishRun's transaction of two statements is used",
	"Jobs.ClaimCandidates":      "ClaimDue is one UPDATE … OUTPUT statement",
	"Jobs.ClaimLockIDs":         "ClaimDue is one UPDATE … OUTPUT statement",
	"Jobs.ClaimLockJobs":        "the leader claims one job per transaction: no batch claims",
	"Jobs.ClaimStart":           "claims start no runs: they start one by one",
	"Jobs.ClaimStartAfter":      "no ClaimStart, no cursor: claims take the due jobs from the start",
	"Jobs.ClaimStartJobs":       "the leader claims one job at a time: no batch claims",
	"Jobs.ClaimStartJobsFenced": "no ClaimStartJobs: the leader's claims are in fenced transactions",
	"Jobs.FinishRunsFenced":     "no FinishRuns: the leader's finishes are in fenced transactions",
	"Jobs.StartRunsFenced":      "no self-fenced statements: the leader starts runs in fenced transactions",
	"Jobs.StartRuns":            "batch starts take array parameters (PostgreSQL); runs start one by one",
	"Jobs.FinishRuns":           "batch finishes take array parameters (PostgreSQL); runs finish one by one",
	"Jobs.StartRunIf":           "batches of single-row statements in one transaction pay off inside the process (SQLite), not over a network",
	"Jobs.ClaimJobs":            "batch claims take array parameters (PostgreSQL); the leader claims one job per transaction",
	"Jobs.InsertJobs":           "bulk inserts take array parameters (PostgreSQL); CreateMany inserts one job per statement in one transaction",
	"Jobs.NextDue":              "claim mode wakes on the next due job only with a change feed (PostgreSQL's LISTEN); here it polls",
	"Jobs.ClaimPeek":            "no NextDue: an idle claim here learns no next due time, and claim mode polls",

	// Claims ahead are the self-fenced claim's (PostgreSQL).
	"Jobs.ClaimStartJobsAheadFenced": "no ClaimStartJobsFenced: the leader claims what is due, in fenced transactions",
	"Jobs.ClaimStartAhead":           "no ClaimStart: claim-mode workers claim what is due",
}

func dialect(t *testing.T, p string) sqlstore.Dialect {
	t.Helper()
	d, err := sqlserver.Dialect(p)
	if err != nil {
		t.Fatalf("Dialect(%q): %v", p, err)
	}
	return d
}

// statements returns every statement field by "Queries.X" / "Jobs.X" name
// (migrations apart), failing the test on a field this test does not know.
func statements(t *testing.T, d sqlstore.Dialect) (map[string]string, []string) {
	t.Helper()
	out := map[string]string{}
	var migrations []string
	for _, group := range []struct {
		name string
		v    reflect.Value
	}{{"Queries", reflect.ValueOf(d.Queries)}, {"Jobs", reflect.ValueOf(d.Jobs)}, {"Singletons", reflect.ValueOf(d.Singletons)},
		{"Output", reflect.ValueOf(d.Jobs.Output)}, {"Checkpoints", reflect.ValueOf(d.Jobs.Checkpoints)},
		{"Occurrences", reflect.ValueOf(d.Jobs.Occurrences)}, {"Revoked", reflect.ValueOf(d.Revoked)}} {
		for i := range group.v.NumField() {
			f := group.v.Type().Field(i)
			key := group.name + "." + f.Name
			switch v := group.v.Field(i).Interface().(type) {
			case string:
				_, known := documented[key]
				why, leaveEmpty := empty[key]
				switch {
				case !known && !leaveEmpty:
					t.Errorf("%s is a statement this test does not know: add its argument count and tables to documented, "+
						"or list it in empty if SQL Server leaves it empty", key)
				case leaveEmpty && v != "":
					t.Errorf("%s is set; SQL Server leaves it empty: %s", key, why)
				case known && v == "":
					t.Errorf("%s is empty", key)
				}
				if known && v != "" {
					out[key] = v
				}
			case sqlstore.WriteRead:
				// The write-then-read pairs serve databases without
				// RETURNING; SQL Server returns rows with OUTPUT in the
				// statement itself.
				if v != (sqlstore.WriteRead{}) {
					t.Errorf("%s is set; SQL Server writes returning statements as one statement with OUTPUT", key)
				}
			case []string:
				if f.Name != "Migrations" {
					t.Errorf("%s: unknown []string field", key)
					continue
				}
				if len(v) == 0 {
					t.Errorf("%s is empty", key)
				}
				for j, m := range v {
					if strings.TrimSpace(m) == "" {
						t.Errorf("%s[%d] is empty", key, j)
					}
				}
				migrations = append(migrations, v...)
			}
		}
	}
	return out, migrations
}

func TestStatementsPresent(t *testing.T) {
	d := dialect(t, prefix)
	if d.Name != "sqlserver" || d.Classify == nil || d.IsUniqueViolation == nil || d.Time == nil {
		t.Errorf("Dialect = %+v: want name sqlserver with Classify, IsUniqueViolation and Time", d)
	}
	got, _ := statements(t, d)
	for key := range documented {
		if _, ok := got[key]; !ok {
			t.Errorf("%s: documented statement missing from the dialect", key)
		}
	}
}

var (
	placeholderRE = regexp.MustCompile(`@(\w+)`)
	bracketedRE   = regexp.MustCompile(`\[([^\]]*)\]`)
	prefixedRE    = regexp.MustCompile(`.?` + prefix + `_\w+.?`)
)

// TestPlaceholders: each statement uses exactly @p1…@pN for its documented
// N (each at least once, none beyond), no other variable, and no other
// dialect's placeholder style.
func TestPlaceholders(t *testing.T) {
	got, migrations := statements(t, dialect(t, prefix))
	for key, text := range got {
		want := documented[key].args
		seen := map[int]bool{}
		for _, m := range placeholderRE.FindAllStringSubmatch(text, -1) {
			n, err := strconv.Atoi(strings.TrimPrefix(m[1], "p"))
			if !strings.HasPrefix(m[1], "p") || err != nil || n < 1 {
				t.Errorf("%s: %q is not a @pN placeholder", key, m[0])
				continue
			}
			seen[n] = true
		}
		var nums []int
		for n := range seen {
			nums = append(nums, n)
		}
		sort.Ints(nums)
		var wantNums []int
		for n := 1; n <= want; n++ {
			wantNums = append(wantNums, n)
		}
		if !slices.Equal(nums, wantNums) {
			t.Errorf("%s uses placeholders %v, want exactly @p1…@p%d:\n%s", key, nums, want, text)
		}
		if strings.ContainsAny(text, "?$") {
			t.Errorf("%s contains ? or $, another dialect's placeholder:\n%s", key, text)
		}
	}
	for i, m := range migrations {
		if strings.ContainsAny(m, "@?$") {
			t.Errorf("migration %d takes parameters:\n%s", i+1, m)
		}
	}
}

// TestTables: each statement names the prefix's tables it is documented to
// touch and no others, always bracket-quoted, and the prefix enters the
// text only through those names.
func TestTables(t *testing.T) {
	d := dialect(t, prefix)
	got, migrations := statements(t, d)
	tables := []string{leases, jobs, runs, singletons, output, checkpoint, revoked, occ}
	for key, text := range got {
		var names []string
		for _, m := range bracketedRE.FindAllStringSubmatch(text, -1) {
			if !slices.Contains(names, m[1]) {
				names = append(names, m[1])
			}
		}
		sort.Strings(names)
		want := slices.Clone(documented[key].tables)
		sort.Strings(want)
		if !slices.Equal(names, want) {
			t.Errorf("%s names tables %v, want %v:\n%s", key, names, want, text)
		}
		for _, m := range prefixedRE.FindAllString(text, -1) {
			name := strings.Trim(m, "[]")
			if !strings.HasPrefix(m, "[") || !strings.HasSuffix(m, "]") || !slices.Contains(tables, name) {
				t.Errorf("%s: %q is not a bracket-quoted table of the prefix", key, m)
			}
		}
	}
	// Migrations may also name the tables' constraints and indexes, which
	// are named after their table.
	for i, m := range migrations {
		var table string
		for _, name := range bracketedRE.FindAllStringSubmatch(m, -1) {
			n := name[1]
			switch {
			case slices.Contains(tables, n):
				if table != "" && table != n {
					t.Errorf("migration %d names two tables, %s and %s", i+1, table, n)
				}
				table = n
			case !strings.HasPrefix(n, prefix+"_"):
				t.Errorf("migration %d names [%s], which is not the prefix's", i+1, n)
			}
		}
		if table == "" {
			t.Errorf("migration %d names none of the prefix's tables:\n%s", i+1, m)
		}
		for _, o := range prefixedRE.FindAllString(m, -1) {
			if !(strings.HasPrefix(o, "[") && strings.HasSuffix(o, "]")) && !(strings.HasPrefix(o, "'") && strings.HasSuffix(o, "'")) {
				t.Errorf("migration %d: %q is neither bracket-quoted nor a name literal", i+1, o)
			}
		}
	}
	// The prefix is the only thing that varies.
	other := dialect(t, "app_2")
	gotOther, migOther := statements(t, other)
	for key, text := range got {
		if want := strings.ReplaceAll(gotOther[key], "app_2_", prefix+"_"); text != want {
			t.Errorf("%s differs between prefixes beyond the table names", key)
		}
	}
	for i := range migrations {
		if want := strings.ReplaceAll(migOther[i], "app_2_", prefix+"_"); migrations[i] != want {
			t.Errorf("migration %d differs between prefixes beyond the names", i+1)
		}
	}
}

// TestMigrationsIdempotent: every migration is guarded so that applying the
// schema again changes nothing; tables come before their indexes.
func TestMigrationsIdempotent(t *testing.T) {
	_, migrations := statements(t, dialect(t, prefix))
	created := map[string]bool{}
	for i, m := range migrations {
		switch {
		case strings.HasPrefix(m, "IF OBJECT_ID(N'["):
			table := bracketedRE.FindStringSubmatch(m)[1]
			if !strings.Contains(m, "IF OBJECT_ID(N'["+table+"]', N'U') IS NULL\nCREATE TABLE ["+table+"] (") {
				t.Errorf("migration %d does not create the table it checks for:\n%s", i+1, m)
			}
			created[table] = true
		case strings.HasPrefix(m, "IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'["):
			table := bracketedRE.FindStringSubmatch(m)[1]
			if !created[table] {
				t.Errorf("migration %d indexes %s before creating it", i+1, table)
			}
			name := regexp.MustCompile(`AND name = N'(\w+)'\)`).FindStringSubmatch(m)
			if name == nil || !strings.Contains(m, "INDEX ["+name[1]+"] ON ["+table+"] (") {
				t.Errorf("migration %d does not create the index it checks for:\n%s", i+1, m)
			}
		default:
			t.Errorf("migration %d is not guarded:\n%s", i+1, m)
		}
	}
	for _, table := range []string{leases, jobs, runs, output, checkpoint, occ} {
		if !created[table] {
			t.Errorf("no migration creates %s", table)
		}
	}
}

// TestSchemaTypes: database times are datetime2(7), identifiers compare
// exactly, and a job's client key is unique only where it is set.
func TestSchemaTypes(t *testing.T) {
	_, migrations := statements(t, dialect(t, prefix))
	all := strings.Join(migrations, "\n")
	for _, col := range []string{"acquired_at", "renewed_at", "expires_at", "next_run_at", "last_run_at", "locked_at",
		"not_before", "created_at", "last_modified_at", "scheduled_for", "started_at", "finished_at", "saved_at"} {
		if !regexp.MustCompile(`\n\t` + col + `\s+datetime2\(7\)`).MatchString(all) {
			t.Errorf("column %s is not datetime2(7)", col)
		}
	}
	for _, col := range []string{"lease_name", "holder_id", "name", "client_key", "locked_by", "job_name"} {
		if !regexp.MustCompile(`\n\t` + col + `\s+nvarchar\(\d+\) COLLATE Latin1_General_100_BIN2 `).MatchString(all) {
			t.Errorf("column %s is not an nvarchar with a binary collation", col)
		}
	}
	for _, want := range []string{
		"CREATE UNIQUE INDEX [" + jobs + "_key] ON [" + jobs + "] (client_key) WHERE client_key IS NOT NULL",
		"CREATE INDEX [" + jobs + "_due] ON [" + jobs + "] (next_run_at, id) WHERE paused = 0 AND next_run_at IS NOT NULL",
		"CREATE INDEX [" + runs + "_running] ON [" + runs + "] (job_id) WHERE outcome = N'running'",
		"CONSTRAINT [" + runs + "_attempt] UNIQUE (job_id, scheduled_for, attempt)",
		"CONSTRAINT [" + leases + "_pk] PRIMARY KEY (lease_name)",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("schema lacks %q", want)
		}
	}
}

// TestOneClock: database time only, UTC only, and at most one reading per
// statement, so that every time a statement compares and stamps is the
// same instant.
func TestOneClock(t *testing.T) {
	got, _ := statements(t, dialect(t, prefix))
	reads := []string{"Queries.Acquire", "Queries.Renew", "Queries.Release", "Queries.Get", "Queries.List", "Queries.FenceLock",
		"Queries.FenceCheck", "Jobs.Now", "Jobs.InsertJob", "Jobs.SetPaused", "Jobs.Trigger", "Jobs.ClaimDue", "Jobs.ClaimJob",
		"Jobs.AbandonRunning", "Jobs.AbandonDeleted", "Jobs.StartJob", "Jobs.InsertRun", "Jobs.Heartbeat", "Jobs.FinishRun", "Jobs.ReleaseJob", "Jobs.PauseLike", "Jobs.SetBreaker",
		"Jobs.Stats", "Jobs.PruneRuns", "Jobs.DueWindow",
		"Singletons.Ensure", "Singletons.Get", "Singletons.List", "Singletons.Start", "Singletons.Save", "Singletons.Heartbeat",
		"Singletons.Fail", "Singletons.Page", "Singletons.Create",
		"Singletons.Place", "Singletons.Give", "Singletons.Placement", "Singletons.StartAssigned", "Singletons.SaveAssigned",
		"Singletons.HeartbeatAssigned", "Singletons.FailAssigned", "Singletons.StartMany", "Output.Insert", "Output.Prune", "Checkpoints.Save", "Checkpoints.Prune", "Revoked.Insert", "Revoked.Check", "Revoked.Prune",
		"Occurrences.Insert", "Occurrences.Candidates", "Occurrences.Claim", "Occurrences.Read", "Occurrences.Start", "Occurrences.AbandonRunning",
		"Occurrences.Heartbeat", "Occurrences.Release", "Occurrences.SetBreaker"}
	for key, text := range got {
		n := strings.Count(text, "SYSUTCDATETIME()")
		want := 0
		if slices.Contains(reads, key) {
			want = 1
		}
		if n != want {
			t.Errorf("%s reads SYSUTCDATETIME() %d times, want %d:\n%s", key, n, want, text)
		}
		upper := strings.ToUpper(text)
		for _, clock := range []string{"GETDATE", "GETUTCDATE", "SYSDATETIME", "CURRENT_TIMESTAMP", "SYSDATETIMEOFFSET"} {
			if strings.Contains(upper, clock) {
				t.Errorf("%s uses %s; only SYSUTCDATETIME() is database UTC time", key, clock)
			}
		}
	}
}

// TestOutput: statements that return rows written by the statement do so
// with OUTPUT inserted.… in the column order sqlstore scans.
func TestOutput(t *testing.T) {
	got, _ := statements(t, dialect(t, prefix))
	var jobCols []string
	for _, c := range strings.Split(sqlstore.JobColumns, ",") {
		jobCols = append(jobCols, "inserted."+strings.TrimSpace(c))
	}
	for key, want := range map[string][]string{
		"Queries.Acquire": {"inserted.lease_epoch", "inserted.acquired_at", "inserted.renewed_at", "inserted.expires_at", "inserted.acquired_at"},
		"Queries.Renew":   {"inserted.acquired_at", "inserted.renewed_at", "inserted.expires_at", "inserted.renewed_at"},
		"Jobs.InsertJob":  jobCols,
		"Jobs.SetPaused":  jobCols,
		"Jobs.Trigger":    jobCols,
		"Jobs.ClaimDue":   append(slices.Clone(jobCols), "inserted.locked_at"),
		"Jobs.ClaimJob":   append(slices.Clone(jobCols), "inserted.locked_at"),
	} {
		text := got[key]
		if strings.Count(text, "OUTPUT ") != 1 {
			t.Errorf("%s has %d OUTPUT clauses, want 1", key, strings.Count(text, "OUTPUT "))
			continue
		}
		line := strings.TrimSuffix(strings.SplitN(strings.SplitN(text, "OUTPUT ", 2)[1], "\n", 2)[0], ";")
		var cols []string
		for _, c := range strings.Split(line, ",") {
			cols = append(cols, strings.TrimSpace(c))
		}
		if !slices.Equal(cols, want) {
			t.Errorf("%s OUTPUT %v,\nwant %v", key, cols, want)
		}
	}
	for _, key := range []string{"Jobs.JobByName", "Jobs.JobByKey", "Jobs.ListJobs"} {
		if !strings.Contains(got[key], sqlstore.JobColumns) {
			t.Errorf("%s does not select sqlstore.JobColumns", key)
		}
	}
	if !strings.Contains(got["Jobs.Runs"], sqlstore.RunColumns) {
		t.Errorf("Jobs.Runs does not select sqlstore.RunColumns")
	}
	if !strings.HasSuffix(got["Queries.Acquire"], ";") {
		t.Errorf("Queries.Acquire: a MERGE must end with a semicolon")
	}
}

// TestLockHints pins the hints the correctness argument in doc.go rests on.
func TestLockHints(t *testing.T) {
	got, _ := statements(t, dialect(t, prefix))
	for key, wants := range map[string][]string{
		"Queries.Acquire": {"MERGE INTO [" + leases + "] WITH (UPDLOCK, HOLDLOCK) AS l", "WHEN MATCHED AND l.expires_at <= s.now THEN UPDATE SET",
			"lease_epoch = l.lease_epoch + 1", "WHEN NOT MATCHED THEN", "VALUES (s.lease_name, s.holder_id, 1, s.now, s.now, s.expires_at)"},
		"Queries.Renew":      {"FROM [" + leases + "] AS l WITH (UPDLOCK, HOLDLOCK)", "l.holder_id = @p2 AND l.lease_epoch = @p3 AND l.expires_at > n.now"},
		"Queries.Release":    {"FROM [" + leases + "] AS l WITH (UPDLOCK, HOLDLOCK)", "l.holder_id = @p2 AND l.lease_epoch = @p3 AND l.expires_at > n.now"},
		"Queries.FenceLock":  {"FROM [" + leases + "] WITH (REPEATABLEREAD, ROWLOCK)", "expires_at > SYSUTCDATETIME()"},
		"Queries.FenceCheck": {"FROM [" + leases + "] WITH (REPEATABLEREAD, ROWLOCK)", "expires_at > SYSUTCDATETIME()"},
		"Queries.Get":        {"WITH (READUNCOMMITTED)"},
		"Queries.List":       {"WITH (READUNCOMMITTED)", "ORDER BY lease_name"},
		"Jobs.ClaimDue":      {"SELECT TOP (@p2) q.id, n.now", "FROM [" + jobs + "] AS q WITH (UPDLOCK, READPAST, ROWLOCK)", "ORDER BY q.next_run_at, q.id", "FROM c JOIN [" + jobs + "] AS j ON j.id = c.id"},
		"Jobs.ClaimJob":      {"WITH (UPDLOCK, ROWLOCK)", "OR q.lock_lease_epoch < @p3", "OR q.lock_lease_epoch = @p3 AND q.locked_by = @p2"},
		"Jobs.InsertJob":     {"WHERE NOT EXISTS (SELECT 1 FROM [" + jobs + "] WITH (UPDLOCK, HOLDLOCK) WHERE name = @p1)"},
		"Jobs.StartJob":      {"WHERE j.id = @p3 AND j.locked_by = @p4 AND j.lock_epoch = @p5"},
		"Jobs.Heartbeat":     {"WHERE id = @p1 AND locked_by = @p2 AND lock_epoch = @p3"},
		"Jobs.ReleaseJob":    {"WHERE j.id = @p4 AND j.locked_by = @p5 AND j.lock_epoch = @p6"},
		// Placement by node: the member leases a write depends on stay as
		// read until it commits; placing nodes skip each other's rows.
		"Singletons.Place": {"SELECT TOP (@p4)", "WITH (UPDLOCK, READPAST, ROWLOCK)", "ORDER BY s.name", "NOT EXISTS (SELECT 1 FROM [" + leases + "] AS l WITH (REPEATABLEREAD, ROWLOCK)",
			"m.holder_id = @p1 AND m.lease_epoch = @p2 AND m.expires_at > n.now"},
		"Singletons.Give":          {"d.holder_id = @p1 AND d.expires_at > n.now", "m.holder_id = @p2 AND m.lease_epoch = @p3", "WHERE s.node_id = @p2 AND s.node_epoch = @p3"},
		"Singletons.SaveAssigned":  {"s.node_id = s.holder_id AND s.generation = s.lease_epoch AND EXISTS (SELECT 1 FROM [" + leases + "] AS l WITH (REPEATABLEREAD, ROWLOCK)", "l.lease_epoch = s.node_epoch AND l.expires_at > n.now"},
		"Singletons.StartAssigned": {"s.node_id = @p4 AND s.generation = @p5 AND EXISTS"},
	} {
		for _, want := range wants {
			if !strings.Contains(got[key], want) {
				t.Errorf("%s lacks %q:\n%s", key, want, got[key])
			}
		}
	}
	// No other statement takes dirty reads.
	for key, text := range got {
		if strings.Contains(text, "READUNCOMMITTED") && key != "Queries.Get" && key != "Queries.List" {
			t.Errorf("%s reads uncommitted data", key)
		}
		if strings.Contains(strings.ToUpper(text), "NOLOCK") {
			t.Errorf("%s uses NOLOCK", key)
		}
	}
}

// TestDurations: every millisecond duration is added as seconds plus a
// remainder, never as one DATEADD(millisecond, …) of the whole count, which
// would overflow DATEADD's int after 24.8 days.
func TestDurations(t *testing.T) {
	got, _ := statements(t, dialect(t, prefix))
	for key, param := range map[string]string{
		"Queries.Acquire": "@p3", "Queries.Renew": "@p4", "Jobs.ReleaseJob": "@p3", "Jobs.PruneRuns": "@p1", "Jobs.DueWindow": "@p1",
	} {
		text := got[key]
		for _, want := range []string{"CAST(" + param + " AS bigint)) % 1000 AS int)", "CAST(" + param + " AS bigint)) / 1000 AS int)"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s does not split %s into seconds and milliseconds (%q):\n%s", key, param, want, text)
			}
		}
	}
	for _, key := range []string{"Jobs.ClaimDue", "Jobs.ClaimJob"} {
		if !strings.Contains(got[key], "DATEADD(second, CAST((q.lock_timeout_ms) / 1000 AS int), q.locked_at)") {
			t.Errorf("%s does not add the lock timeout as seconds plus milliseconds:\n%s", key, got[key])
		}
	}
	if sqlserver.MaxDuration.Milliseconds()/1000 != 1<<31-1 {
		t.Errorf("MaxDuration = %s, want 2^31-1 seconds", sqlserver.MaxDuration)
	}
}

// StartMany (sqlstore.SingletonQueries): StartAssigned of a batch, one
// UPDATE … OUTPUT.
func init() {
	documented["Singletons.StartMany"] = stmt{2, []string{singletons, leases}} // (holder, pairs JSON)
}

// TestStartManyFence: the batch start is fenced as StartAssigned, pair by
// pair: the row's node and generation are the pair's, and the member lease
// is live under REPEATABLEREAD.
func TestStartManyFence(t *testing.T) {
	got, _ := statements(t, dialect(t, prefix))
	text := got["Singletons.StartMany"]
	for _, want := range []string{"OUTPUT inserted.name, inserted.state", "OPENJSON(@p2) WITH (n nvarchar(128), g bigint) AS p",
		"ON s.name = p.n COLLATE Latin1_General_100_BIN2 AND s.generation = p.g", "WHERE s.node_id = @p1 AND EXISTS (SELECT 1 FROM [" + leases + "] AS l WITH (REPEATABLEREAD, ROWLOCK)",
		"l.lease_epoch = s.node_epoch AND l.expires_at > n.now", "lease_epoch = s.generation"} {
		if !strings.Contains(text, want) {
			t.Errorf("Singletons.StartMany lacks %q:\n%s", want, text)
		}
	}
}
