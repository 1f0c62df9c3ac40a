package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
)

// memoryOpts configure the leader-memory scenario.
type memoryOpts struct {
	Dialect   string
	Jobs      int
	Horizon   time.Duration // scheduler.Config.ScheduleHorizon
	Offset    time.Duration // first job due this long after the insert
	Spread    time.Duration // jobs spread evenly over this span
	Wait      time.Duration // leader runs at most this long after the rebuild
	Refreshes int           // stop after this many completed refreshes
}

// refreshRec is one completed leader refresh (a run of Changed pages ending
// with a short page) or reload (one DueWindow query).
type refreshRec struct {
	Took  time.Duration
	Pages int
	Rows  int
}

// memoryResult is one run, produced in a child process so that VmHWM is
// this scenario's alone.
type memoryResult struct {
	Background  float64 // machine busy share just before the run (others' load)
	Jobs        int
	Insert      time.Duration
	Rebuild     time.Duration // Lead start → schedule_rebuilt
	Entries     string        // schedule_rebuilt's "entries"
	MemBefore   memSample     // after seeding, before the elector starts
	MemRebuilt  memSample     // right after the rebuild
	MemEnd      memSample     // after the refreshes
	Refreshes   []refreshRec
	Reloads     []refreshRec
	HandlerRuns int64
	Warnings    map[string]int
	WarnLines   []string
	Plan        string // EXPLAIN of a Changed page in the middle of the table
	PlanRun     time.Duration
}

// runMemoryChild re-executes this binary for one run of the scenario and
// reads its JSON result.
func runMemoryChild(ctx context.Context, e *env, o memoryOpts) (memoryResult, error) {
	var res memoryResult
	exe, err := os.Executable()
	if err != nil {
		return res, err
	}
	args := []string{"-child-memory", o.Dialect, "-memory-jobs", strconv.Itoa(o.Jobs),
		"-memory-horizon", o.Horizon.String(), "-memory-offset", o.Offset.String(), "-memory-spread", o.Spread.String(),
		"-memory-wait", o.Wait.String(), "-memory-refreshes", strconv.Itoa(o.Refreshes), "-sqlite-dir", e.sqliteDir}
	if e.pgURL != "" {
		args = append(args, "-db", e.pgURL)
	}
	if e.verbose {
		args = append(args, "-v")
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return res, fmt.Errorf("memory child: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		return res, fmt.Errorf("memory child output: %w (%q)", err, out.String())
	}
	return res, nil
}

// childMemory is the child's side: one run, JSON on stdout.
func childMemory(ctx context.Context, e *env, o memoryOpts) error {
	res, err := runMemory(ctx, e, o)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

func runMemory(ctx context.Context, e *env, o memoryOpts) (memoryResult, error) {
	res := memoryResult{Jobs: o.Jobs}
	tg, setup, done, err := e.migrated(ctx, o.Dialect)
	if err != nil {
		return res, err
	}
	defer done()
	t0 := time.Now()
	step := o.Spread / time.Duration(max(o.Jobs, 1))
	if _, _, err := seed(ctx, setup, o.Dialect, o.Jobs, seedFuture, o.Offset, step); err != nil {
		return res, err
	}
	res.Insert = time.Since(t0)
	logf("  inserted %d future jobs in %s", o.Jobs, fmtDur(res.Insert))
	setup.DB().SetMaxIdleConns(1)

	// The leader's pool is traced to time its refresh (Changed) and reload
	// (DueWindow) queries; tracing costs a clock read per statement.
	tr := newTracer()
	st, err := tg.open(tr)
	if err != nil {
		return res, err
	}
	defer st.DB().Close()
	changedSQL, dueSQL := st.Dialect().Jobs.Changed, st.Dialect().Jobs.DueWindow
	var mu sync.Mutex
	var cur *refreshRec
	var curStart time.Time
	refreshed := make(chan struct{}, 1024)
	tr.onQuery = func(q string, rows int, start time.Time, took time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		switch q {
		case changedSQL:
			if cur == nil {
				cur, curStart = &refreshRec{}, start
			}
			cur.Pages++
			cur.Rows += rows
			if rows < 1000 { // the leader's refreshPage: a short page ends the refresh
				cur.Took = start.Add(took).Sub(curStart)
				res.Refreshes = append(res.Refreshes, *cur)
				cur = nil
				refreshed <- struct{}{}
			}
		case dueSQL:
			res.Reloads = append(res.Reloads, refreshRec{Took: took, Pages: 1, Rows: rows})
		}
	}

	var calls atomic.Int64
	logs := newLogCounter()
	logger := slog.New(logs)
	rebuilt := logs.waitFor("schedule_rebuilt")
	s, err := scheduler.New(scheduler.Config{Store: st, Logger: logger, ScheduleHorizon: o.Horizon,
		Handler: func(context.Context, sqlease.Run) error { calls.Add(1); return nil }})
	if err != nil {
		return res, err
	}
	res.MemBefore = sampleMem()
	var leadStart atomic.Int64
	el, err := benchLeader(st, s, logger, &leadStart)
	if err != nil {
		return res, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = el.Run(runCtx) }()

	deadline := time.NewTimer(o.Wait + 60*time.Second)
	defer deadline.Stop()
	select {
	case l := <-rebuilt:
		res.Rebuild = l.At.Sub(time.Unix(0, leadStart.Load()))
		res.Entries = l.Attrs["entries"]
	case <-deadline.C:
		cancel()
		wg.Wait()
		w, lines := logs.snapshot()
		return res, fmt.Errorf("no schedule_rebuilt within %s (warnings %v %v)", o.Wait+60*time.Second, w, lines)
	}
	logf("  rebuilt in %s with %s entries", fmtDur(res.Rebuild), res.Entries)
	res.MemRebuilt = sampleMem()

	wait := time.NewTimer(o.Wait)
	defer wait.Stop()
	n := 0
loop:
	for n < o.Refreshes {
		select {
		case <-refreshed:
			n++
		case <-wait.C:
			break loop
		}
	}
	res.MemEnd = sampleMem()
	cancel()
	wg.Wait()
	res.HandlerRuns = calls.Load()
	res.Warnings, res.WarnLines = logs.snapshot()
	mu.Lock()
	if cur != nil { // a refresh still running at the end
		cur.Took = -time.Since(curStart)
		res.Refreshes = append(res.Refreshes, *cur)
	}
	mu.Unlock()

	// The plan of a refresh page whose cursor is in the middle of the table.
	var mid time.Time
	var midID int64
	var midRaw any
	midQ := `SELECT last_modified_at, id FROM ` + prefix + `_jobs ORDER BY last_modified_at, id LIMIT 1 OFFSET $1`
	if o.Dialect == "sqlite" {
		midQ = strings.Replace(midQ, "$1", "?1", 1)
	}
	if err := setup.DB().QueryRowContext(ctx, midQ, o.Jobs/2).Scan(&midRaw, &midID); err == nil {
		switch v := midRaw.(type) {
		case time.Time:
			mid = v
		case string:
			mid, _ = time.Parse("2006-01-02 15:04:05.000", v)
		}
		arg := any(mid)
		if o.Dialect == "sqlite" {
			arg = mid.UTC().Format("2006-01-02 15:04:05.000")
		}
		explain := "EXPLAIN (ANALYZE, BUFFERS) "
		if o.Dialect == "sqlite" {
			explain = "EXPLAIN QUERY PLAN "
		}
		t := time.Now()
		rows, err := setup.DB().QueryContext(ctx, explain+changedSQL, arg, arg, midID, 1000)
		if err == nil {
			var b strings.Builder
			cols, _ := rows.Columns()
			for rows.Next() {
				vals := make([]any, len(cols))
				ptrs := make([]any, len(cols))
				for i := range vals {
					ptrs[i] = &vals[i]
				}
				if rows.Scan(ptrs...) == nil {
					parts := make([]string, 0, len(vals))
					for _, v := range vals {
						parts = append(parts, fmt.Sprint(v))
					}
					b.WriteString(strings.Join(parts, " | ") + "\n")
				}
			}
			rows.Close()
			res.Plan = b.String()
		} else {
			res.Plan = "explain failed: " + err.Error()
		}
		res.PlanRun = time.Since(t)
		if o.Dialect == "sqlite" { // EXPLAIN QUERY PLAN does not run it: time the page itself
			t = time.Now()
			if rows, err := setup.DB().QueryContext(ctx, changedSQL, arg, arg, midID, 1000); err == nil {
				for rows.Next() {
				}
				rows.Close()
			}
			res.PlanRun = time.Since(t)
		}
	}
	return res, nil
}
