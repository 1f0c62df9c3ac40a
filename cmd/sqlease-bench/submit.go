package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
)

// submitResult is one run of the submit-latency scenario.
type submitResult struct {
	Background float64 // machine busy share just before the run (others' load)
	Creates    int
	Submitters int
	Elapsed    time.Duration
	PerSec     float64
	P50, P99   time.Duration
	Max        time.Duration
	Errors     int64
	CPU        cpuUse
	Server     *pgStats
	PGCPU      *pgCPUUse
	Trace      *traceSnapshot
}

// runSubmit times scheduler.Create of one-off jobs ("at" one hour ahead)
// from `submitters` goroutines sharing one scheduler and pool, as an API
// server handling concurrent requests would.
func runSubmit(ctx context.Context, e *env, dialect string, creates, submitters int) (submitResult, error) {
	res := submitResult{Creates: creates, Submitters: submitters}
	tg, err := e.newTarget(ctx, dialect)
	if err != nil {
		return res, err
	}
	defer tg.cleanup()
	setup, err := tg.open(nil)
	if err != nil {
		return res, err
	}
	if err := tg.migrate(ctx, setup); err != nil {
		setup.DB().Close()
		return res, err
	}
	setup.DB().Close()

	var tr *tracer
	if e.trace {
		tr = newTracer()
	}
	st, err := tg.open(tr)
	if err != nil {
		return res, err
	}
	defer st.DB().Close()
	s, err := scheduler.New(scheduler.Config{Store: st})
	if err != nil {
		return res, err
	}
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	lat := make([]time.Duration, creates)
	var next atomic.Int64
	var errs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	before := sampleCPU()
	pgCPU := e.pgCPUStart()
	start := time.Now()
	for w := 0; w < submitters; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(creates) {
					return
				}
				job := sqlease.Job{Name: fmt.Sprintf("submit-%d", i), Schedule: sqlease.Schedule{At: at}}
				t0 := time.Now()
				_, created, err := s.Create(ctx, job)
				lat[i] = time.Since(t0)
				if err != nil || !created {
					errs.Add(1)
					if err != nil {
						firstErr.CompareAndSwap(nil, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.PGCPU = pgCPU()
	res.CPU = cpuBetween(before, sampleCPU())
	res.PerSec = float64(creates) / res.Elapsed.Seconds()
	q := durationsQuantiles(lat, 0.5, 0.99, 1)
	res.P50, res.P99, res.Max = q[0], q[1], q[2]
	res.Errors = errs.Load()
	if err, _ := firstErr.Load().(error); err != nil {
		fmt.Fprintf(stderr, "  first create error: %v\n", err)
	}
	st.DB().Close()
	if tr != nil {
		s := tr.snapshot()
		res.Trace = &s
	}
	if dialect == "postgres" {
		if ss, err := e.serverStats(ctx, tg.dbName); err == nil {
			res.Server = &ss
		}
	}
	return res, nil
}
