package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite"
)

// On-time mode: n no-op jobs inserted with InsertOpts.ScheduledAt at known
// instants (rate a second, the first lead after the insert, into a client
// running for warm already), and
// the delay from each job's ScheduledAt to the start of its Work. River's
// job scheduler (a leader's maintenance service, every 5 s in v0.51.1)
// makes the scheduled jobs due within its next interval available ahead
// of time; producers fetch the due ones (FetchPollInterval polls, and
// LISTEN/NOTIFY on PostgreSQL). It prints one JSON line:
// {"jobs", "p50_ms", "p99_ms", "max_ms", "settings"}.

type ontimeArgs struct{}

func (ontimeArgs) Kind() string { return "ontime" }

type ontimeWorker struct {
	river.WorkerDefaults[ontimeArgs]
	mu     sync.Mutex
	delays []time.Duration
	want   int
	done   chan struct{}
}

func (w *ontimeWorker) Work(_ context.Context, j *river.Job[ontimeArgs]) error {
	d := time.Since(j.ScheduledAt) // the database runs on this machine: one clock
	w.mu.Lock()
	w.delays = append(w.delays, d)
	if len(w.delays) == w.want {
		close(w.done)
	}
	w.mu.Unlock()
	return nil
}

func runOntime(drv, db string, n int, rate float64, lead, warm time.Duration, tuned bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	switch drv {
	case "pgx":
		pool, err := pgxpool.New(ctx, db)
		if err != nil {
			return err
		}
		defer pool.Close()
		return ontime(ctx, riverpgxv5.New(pool), n, rate, lead, warm, tuned)
	case "sqlite":
		pool, err := openSQLite(db)
		if err != nil {
			return err
		}
		defer pool.Close()
		return ontime(ctx, riversqlite.New(pool), n, rate, lead, warm, tuned)
	}
	return fmt.Errorf("unknown driver %q", drv)
}

// openSQLite opens the SQLite file at path as riversqlite's documentation
// asks: WAL, a busy timeout, one connection.
func openSQLite(path string) (*sql.DB, error) {
	pool, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, err
	}
	pool.SetMaxOpenConns(1)
	return pool, nil
}

func ontime[TTx any](ctx context.Context, driver riverdriver.Driver[TTx], n int, rate float64, lead, warm time.Duration, tuned bool) error {
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	w := &ontimeWorker{want: n, done: make(chan struct{})}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	cfg := &river.Config{Workers: workers, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}}}
	settings := "defaults (MaxWorkers 100, FetchCooldown 100 ms, FetchPollInterval 1 s)"
	if tuned {
		cfg.FetchCooldown, cfg.FetchPollInterval = time.Millisecond, 10*time.Millisecond
		settings = "latency-tuned (MaxWorkers 100, FetchCooldown 1 ms, FetchPollInterval 10 ms)"
	}
	client, err := river.NewClient(driver, cfg)
	if err != nil {
		return err
	}
	// Started first and left to settle (elect its leader, start its
	// maintenance services), as a running fleet would be, and as sqlease's
	// dispatch idles before its jobs are created.
	if err := client.Start(ctx); err != nil {
		return err
	}
	select {
	case <-time.After(warm):
	case <-ctx.Done():
		return ctx.Err()
	}
	t0 := time.Now().Add(lead)
	step := time.Duration(float64(time.Second) / rate)
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: ontimeArgs{}, InsertOpts: &river.InsertOpts{ScheduledAt: t0.Add(time.Duration(i) * step)}}
	}
	for lo := 0; lo < n; lo += 5000 {
		if _, err := client.InsertMany(ctx, params[lo:min(lo+5000, n)]); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
	}
	if time.Now().After(t0) {
		return fmt.Errorf("the insert took longer than -lead %s", lead)
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		w.mu.Lock()
		got := len(w.delays)
		w.mu.Unlock()
		return fmt.Errorf("%d of %d jobs started: %w", got, n, ctx.Err())
	}
	stopCtx, cancelStop := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelStop()
	_ = client.Stop(stopCtx)
	w.mu.Lock()
	d := slices.Clone(w.delays)
	w.mu.Unlock()
	slices.Sort(d)
	ms := func(x time.Duration) float64 { return float64(x) / float64(time.Millisecond) }
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"jobs": n, "p50_ms": ms(d[len(d)/2]), "p99_ms": ms(d[len(d)*99/100]),
		"max_ms": ms(d[len(d)-1]), "settings": settings})
}
