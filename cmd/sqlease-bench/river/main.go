// Command river is the peer baseline of sqlease-bench: River (the Postgres
// job queue Go teams pick first) working off n pre-inserted no-op jobs on
// the same server (or, with -driver sqlite, a SQLite file through
// riversqlite), in a module of its own so that sqlease's go.mod stays
// clean. It prints {"phase":"start"} as its work phase starts, then one JSON
// line: {"jobs", "seconds", "per_sec", "cpu_seconds"} (its own CPU during
// the work phase).
//
//	go run . -db postgres://… -jobs 20000 [-tuned]
//	go run . -driver sqlite -db /tmp/river.db -jobs 20000 [-tuned]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (*noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

func main() {
	db := flag.String("db", "", "PostgreSQL URL of a fresh database (with -driver sqlite: a file path)")
	n := flag.Int("jobs", 20000, "no-op jobs to work off")
	tuned := flag.Bool("tuned", false, "MaxWorkers 1000 and FetchCooldown 1 ms (else River's defaults); with -ontime, FetchCooldown 1 ms and FetchPollInterval 10 ms")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after")
	ontime := flag.Bool("ontime", false, "on-time mode (ontime.go): -jobs jobs scheduled at known instants, -rate a second, from -lead after the insert; prints start delays")
	rate := flag.Float64("rate", 1000, "with -ontime: jobs due per second")
	lead := flag.Duration("lead", 3*time.Second, "with -ontime: the first job is due this long after the client starts")
	warm := flag.Duration("warm", 6*time.Second, "with -ontime: run the client this long before inserting the jobs")
	drv := flag.String("driver", "pgx", "pgx (PostgreSQL) or sqlite (riversqlite on modernc.org/sqlite, one connection)")
	flag.Parse()
	if *ontime {
		if err := runOntime(*drv, *db, *n, *rate, *lead, *warm, *tuned, *timeout); err != nil {
			fmt.Fprintln(os.Stderr, "river:", err)
			os.Exit(1)
		}
		return
	}
	if err := runThroughput(*drv, *db, *n, *tuned, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "river:", err)
		os.Exit(1)
	}
}

func runThroughput(drv, db string, n int, tuned bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	switch drv {
	case "pgx":
		pool, err := pgxpool.New(ctx, db)
		if err != nil {
			return err
		}
		defer pool.Close()
		// As sqlease's tables are in the bench: statistics that know the
		// rows, so that neither side's plans are a guess over an empty table.
		analyze := func(ctx context.Context) error { _, err := pool.Exec(ctx, "ANALYZE river_job"); return err }
		return throughput(ctx, riverpgxv5.New(pool), analyze, n, tuned)
	case "sqlite":
		pool, err := openSQLite(db)
		if err != nil {
			return err
		}
		defer pool.Close()
		analyze := func(ctx context.Context) error { _, err := pool.ExecContext(ctx, "ANALYZE river_job"); return err }
		return throughput(ctx, riversqlite.New(pool), analyze, n, tuned)
	}
	return fmt.Errorf("unknown driver %q", drv)
}

func throughput[TTx any](ctx context.Context, driver riverdriver.Driver[TTx], analyze func(context.Context) error, n int, tuned bool) error {
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	// River has no default worker count: 100 is its documentation's.
	cfg := &river.Config{Workers: workers, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}}}
	if tuned {
		cfg.Queues[river.QueueDefault] = river.QueueConfig{MaxWorkers: 1000}
		cfg.FetchCooldown = time.Millisecond
	}
	client, err := river.NewClient(driver, cfg)
	if err != nil {
		return err
	}
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{}}
	}
	for lo := 0; lo < n; lo += 5000 {
		if _, err := client.InsertMany(ctx, params[lo:min(lo+5000, n)]); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
	}
	if err := analyze(ctx); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	// A channel for every event: River drops events a full channel cannot
	// take, and a lost completion would never end the count.
	done, stop := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 1,
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed}})
	defer stop()
	// The work phase starts here: the bench samples the server's CPU
	// when it reads this line, and again at the result, so that neither
	// side's figures include its insert.
	if _, err := fmt.Println(`{"phase":"start"}`); err != nil {
		return err
	}
	cpu0 := cpuTime()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return err
	}
	for got := 0; got < n; {
		select {
		case ev := <-done:
			if ev == nil {
				return fmt.Errorf("subscription closed after %d of %d jobs", got, n)
			}
			if ev.Kind == river.EventKindJobFailed {
				return fmt.Errorf("job %d failed", ev.Job.ID)
			}
			got++
		case <-ctx.Done():
			return fmt.Errorf("%d of %d jobs done: %w", got, n, ctx.Err())
		}
	}
	secs := time.Since(start).Seconds()
	cpu := cpuTime() - cpu0
	stopCtx, cancelStop := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelStop()
	_ = client.Stop(stopCtx)
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"jobs": n, "seconds": secs, "per_sec": float64(n) / secs,
		"cpu_seconds": cpu.Seconds()})
}

// cpuTime is the CPU time of this process so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
