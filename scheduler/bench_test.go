package scheduler_test

// Benchmarks of the scheduler against SQLite and PostgreSQL, for profiling
// with go test (cmd/sqlease-bench runs the same scenarios repeatedly and
// reports medians, CPU split and statement counts):
//
//	go test -run '^$' -bench 'ClaimThroughput/postgres/workers=1/tuned' -benchtime 20000x \
//	    -cpuprofile cpu.out ./scheduler && go tool pprof -top -nodecount 40 scheduler.test cpu.out
//
// One op is one job: b.N due one-off no-op jobs are seeded (outside the
// timer), then dispatched; the timer stops when the last run's finish write
// has returned. "defaults" is scheduler.Config and database/sql defaults;
// "tuned" sets PollInterval 10ms and lets every pool keep its connections
// idle (SetMaxIdleConns(1000)).
//
// PostgreSQL: $SQLEASE_TEST_POSTGRES_URL, else a private server started
// through internal/pgtest for each top-level benchmark (binaries in
// /usr/lib/postgresql/15/bin or $SQLEASE_TEST_PG_BIN). MySQL/MariaDB
// (sub-benchmarks "mysql/…") only where $SQLEASE_TEST_MYSQL_URL is set. Do not run these
// under -race (scripts/test.sh adds it): the race detector slows the client
// several times.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/internal/mysqltest"
	"github.com/sqlease/sqlease/internal/pgtest"
	"github.com/sqlease/sqlease/mysql"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlite"
	"github.com/sqlease/sqlease/sqlstore"
)

// benchFreshTarget creates a fresh database for one sub-benchmark run.
func benchFreshTarget(b *testing.B, dialect, pgURL string) func(b *testing.B) *sqlstore.Store {
	switch dialect {
	case "sqlite":
		return benchOpener(filepath.Join(b.TempDir(), "jobs.db"), sqlite.OpenStore)
	case "mysql":
		return benchOpener(mysqltest.CreateDatabase(b, os.Getenv("SQLEASE_TEST_MYSQL_URL")), mysql.OpenStore)
	default:
		return benchOpener(pgtest.CreateDatabase(b, pgURL), postgres.OpenStore)
	}
}

// benchOpener opens a store on the database url (a file for SQLite) with
// open, for each call.
func benchOpener(url string, open func(context.Context, string, string) (*sqlstore.Store, error)) func(b *testing.B) *sqlstore.Store {
	return func(b *testing.B) *sqlstore.Store {
		s, err := open(context.Background(), url, "sqlease")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.DB().Close() })
		return s
	}
}

// benchPostgresURL returns $SQLEASE_TEST_POSTGRES_URL or starts a private
// server for the calling (top-level) benchmark.
func benchPostgresURL(b *testing.B) string {
	if u := os.Getenv("SQLEASE_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return pgtest.Start(b).URL()
}

// benchDialects are the databases the benchmarks run on.
func benchDialects() []string {
	if os.Getenv("SQLEASE_TEST_MYSQL_URL") != "" {
		return []string{"sqlite", "postgres", "mysql"}
	}
	return []string{"sqlite", "postgres"}
}

// benchSeed creates one job through Create and copies it n times in one
// INSERT … SELECT (so every column is what Create writes), due now.
func benchSeed(b *testing.B, st *sqlstore.Store, dialect string, n int) (minID, maxID int64) {
	ctx := context.Background()
	s, err := scheduler.New(scheduler.Config{Store: st})
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := s.Create(ctx, sqlease.Job{Name: "bench-template"}); err != nil {
		b.Fatal(err)
	}
	cols := `name, client_key, spec_hash, schedule, action, missed_runs, skip_if_older_than_ms,
	max_attempts, backoff_ms, lock_timeout_ms, paused, next_run_at, created_at, last_modified_at`
	// Due times 1ms apart into the past, as jobs submitted over time would
	// be. (All at one instant, more than MaxScheduled of them stall the
	// leader: see cmd/sqlease-bench -due-spread 0.)
	sel := `SELECT 'bench-' || g, NULL, t.spec_hash, t.schedule, t.action, t.missed_runs, t.skip_if_older_than_ms,
	t.max_attempts, t.backoff_ms, t.lock_timeout_ms, t.paused, %s, t.created_at, t.last_modified_at`
	q := `INSERT INTO sqlease_jobs (` + cols + `) ` + fmt.Sprintf(sel, `t.next_run_at - ($1::int - g) * interval '1 millisecond'`) +
		` FROM sqlease_jobs t CROSS JOIN generate_series(1, $1::int) g WHERE t.name = 'bench-template'`
	if dialect == "sqlite" {
		q = `WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < ?1)
INSERT INTO sqlease_jobs (` + cols + `) ` + fmt.Sprintf(sel, `strftime('%Y-%m-%d %H:%M:%f', t.next_run_at, (-(?1 - g) / 1000.0) || ' seconds')`) +
			` FROM sqlease_jobs t, s WHERE t.name = 'bench-template'`
	}
	if dialect == "mysql" {
		// MariaDB's sequence engine: seq_1_to_<n> holds 1 … n.
		q = `INSERT INTO sqlease_jobs (` + cols + `) ` + fmt.Sprintf(strings.Replace(sel, `'bench-' || g`, `CONCAT('bench-', g.seq)`, 1),
			`t.next_run_at - INTERVAL (? - g.seq) * 1000 MICROSECOND`) + fmt.Sprintf(` FROM sqlease_jobs t CROSS JOIN seq_1_to_%d g WHERE t.name = 'bench-template'`, n)
	}
	if _, err := st.DB().ExecContext(ctx, q, n); err != nil {
		b.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx, `DELETE FROM sqlease_jobs WHERE name = 'bench-template'`); err != nil {
		b.Fatal(err)
	}
	if dialect == "postgres" {
		if _, err := st.DB().ExecContext(ctx, `ANALYZE sqlease_jobs`); err != nil {
			b.Fatal(err)
		}
	}
	if err := st.DB().QueryRowContext(ctx, `SELECT min(id), max(id) FROM sqlease_jobs`).Scan(&minID, &maxID); err != nil {
		b.Fatal(err)
	}
	return minID, maxID
}

// benchCounter is the no-op handler and the observer.
type benchCounter struct {
	minID    int64
	seen     []atomic.Int32
	finished atomic.Int64
	want     int64
	done     chan struct{}
	once     sync.Once
}

func newBenchCounter(minID, maxID int64, want int) *benchCounter {
	return &benchCounter{minID: minID, seen: make([]atomic.Int32, maxID-minID+1), want: int64(want), done: make(chan struct{})}
}

func (c *benchCounter) handle(_ context.Context, r sqlease.Run) error {
	if i := r.JobID - c.minID; i >= 0 && i < int64(len(c.seen)) {
		c.seen[i].Add(1)
	}
	return nil
}

func (c *benchCounter) RunFinished(string, sqlease.Outcome, time.Duration) {
	if c.finished.Add(1) == c.want {
		c.once.Do(func() { close(c.done) })
	}
}

func (c *benchCounter) check(b *testing.B, st *sqlstore.Store) {
	b.Helper()
	for i := range c.seen {
		if n := c.seen[i].Load(); n != 1 {
			b.Errorf("job %d ran %d times", c.minID+int64(i), n)
			return
		}
	}
	var runs, ok int64
	if err := st.DB().QueryRowContext(context.Background(),
		`SELECT count(*), coalesce(sum(CASE WHEN outcome = 'succeeded' THEN 1 ELSE 0 END), 0) FROM sqlease_runs`).Scan(&runs, &ok); err != nil {
		b.Fatal(err)
	}
	if runs != c.want || ok != c.want {
		b.Errorf("runs table: %d rows, %d succeeded; want %d", runs, ok, c.want)
	}
}

type benchConfig struct {
	name    string
	poll    time.Duration
	maxIdle int // <0: database/sql default
}

var benchConfigs = []benchConfig{{"defaults", 0, -1}, {"tuned", 10 * time.Millisecond, 1000}}

func benchOpen(b *testing.B, open func(*testing.B) *sqlstore.Store, cfg benchConfig) *sqlstore.Store {
	st := open(b)
	if cfg.maxIdle >= 0 {
		st.DB().SetMaxIdleConns(cfg.maxIdle)
	}
	return st
}

func benchWait(b *testing.B, c *benchCounter) {
	select {
	case <-c.done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("only %d of %d jobs finished after 10 minutes", c.finished.Load(), c.want)
	}
}

// BenchmarkClaimThroughput: claim-mode dispatch of b.N due no-op jobs by 1
// or 4 worker schedulers, each with its own pool.
func BenchmarkClaimThroughput(b *testing.B) {
	pgURL := benchPostgresURL(b)
	for _, dialect := range benchDialects() {
		for _, workers := range []int{1, 4} {
			for _, cfg := range benchConfigs {
				b.Run(fmt.Sprintf("%s/workers=%d/%s", dialect, workers, cfg.name), func(b *testing.B) {
					open := benchFreshTarget(b, dialect, pgURL)
					setup := open(b)
					minID, maxID := benchSeed(b, setup, dialect, b.N)
					c := newBenchCounter(minID, maxID, b.N)
					scheds := make([]*scheduler.Scheduler, workers)
					for i := range scheds {
						s, err := scheduler.New(scheduler.Config{Store: benchOpen(b, open, cfg), Holder: fmt.Sprintf("w%d", i),
							Handler: c.handle, Observer: c, PollInterval: cfg.poll})
						if err != nil {
							b.Fatal(err)
						}
						scheds[i] = s
					}
					ctx, cancel := context.WithCancel(context.Background())
					var wg sync.WaitGroup
					b.ResetTimer()
					start := time.Now()
					for _, s := range scheds {
						wg.Add(1)
						go func() { defer wg.Done(); _ = s.Run(ctx) }()
					}
					benchWait(b, c)
					elapsed := time.Since(start)
					b.StopTimer()
					cancel()
					wg.Wait()
					b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
					c.check(b, setup)
				})
			}
		}
	}
}

// BenchmarkLeaderDispatch: an elector (defaults) whose OnStartedLeading
// calls Lead dispatches b.N due no-op jobs; timed from the elector's start.
func BenchmarkLeaderDispatch(b *testing.B) {
	pgURL := benchPostgresURL(b)
	for _, dialect := range benchDialects() {
		for _, cfg := range benchConfigs {
			b.Run(fmt.Sprintf("%s/%s", dialect, cfg.name), func(b *testing.B) {
				open := benchFreshTarget(b, dialect, pgURL)
				setup := open(b)
				minID, maxID := benchSeed(b, setup, dialect, b.N)
				c := newBenchCounter(minID, maxID, b.N)
				st := benchOpen(b, open, cfg)
				s, err := scheduler.New(scheduler.Config{Store: st, Handler: c.handle, Observer: c})
				if err != nil {
					b.Fatal(err)
				}
				var e *election.Elector
				e, err = election.New(election.Config{Store: st, HolderID: "bench-leader",
					OnStartedLeading: func(ctx context.Context, tok sqlease.Token) { _ = s.Lead(ctx, e, tok) }})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				b.ResetTimer()
				start := time.Now()
				go func() { defer close(done); _ = e.Run(ctx) }()
				benchWait(b, c)
				elapsed := time.Since(start)
				b.StopTimer()
				cancel()
				<-done
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
				c.check(b, setup)
			})
		}
	}
}

// BenchmarkCreate: scheduler.Create of one-off jobs, from 1 goroutine or 8
// sharing one scheduler and pool; reports p50 and p99 latency.
func BenchmarkCreate(b *testing.B) {
	pgURL := benchPostgresURL(b)
	for _, dialect := range benchDialects() {
		for _, submitters := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/submitters=%d", dialect, submitters), func(b *testing.B) {
				open := benchFreshTarget(b, dialect, pgURL)
				s, err := scheduler.New(scheduler.Config{Store: open(b)})
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				at := time.Now().Add(time.Hour)
				lat := make([]time.Duration, b.N)
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				for w := 0; w < submitters; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							i := next.Add(1) - 1
							if i >= int64(b.N) {
								return
							}
							t0 := time.Now()
							if _, _, err := s.Create(ctx, sqlease.Job{Name: fmt.Sprintf("c-%d", i), Schedule: sqlease.Schedule{At: at}}); err != nil {
								b.Error(err)
								return
							}
							lat[i] = time.Since(t0)
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds()), "p99-µs")
			})
		}
	}
}
