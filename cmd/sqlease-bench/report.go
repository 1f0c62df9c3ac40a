package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/sqlite"
	"github.com/sqlease/sqlease/sqlstore"
)

func labelsFor(dialect string) func(string) string {
	var d sqlstore.Dialect
	if dialect == "postgres" {
		d, _ = postgres.Dialect(prefix)
	} else {
		d, _ = sqlite.Dialect(prefix)
	}
	return statementLabels(d)
}

func perJob(d time.Duration, jobs int64) string {
	if jobs <= 0 {
		return "-"
	}
	return fmtDur(d / time.Duration(jobs))
}

// medianIndex returns the index of the run whose value is the median.
func medianIndex(vals []float64) int {
	idx := make([]int, len(vals))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return vals[idx[a]] < vals[idx[b]] })
	return idx[(len(idx)-1)/2]
}

// rounds runs a scenario's rounds one after another, each once the machine
// has settled, and hands done each round that worked with its number (from
// 1) and the machine's busy share measured before it. A failed round is
// printed and makes the bench exit 1; the others go on. It returns false
// when ctx ended (an interrupt): the scenario stops and prints no summary
// of a cut-short round.
func rounds[R any](ctx context.Context, e *env, runs int, run func() (R, error), done func(i int, bg float64, r R)) bool {
	for i := 1; i <= runs; i++ {
		bg := settle(e.settleBusy, e.settleWait)
		r, err := run()
		if ctx.Err() != nil {
			return false
		}
		if err != nil {
			fmt.Printf("  run %d: ERROR %v\n", i, err)
			exitCode = 1
			continue
		}
		done(i, bg, r)
	}
	return true
}

// metric is one metric f of each round's result.
func metric[R any](results []R, f func(R) float64) []float64 {
	v := make([]float64, len(results))
	for i, r := range results {
		v[i] = f(r)
	}
	return v
}

func throughputScenario(ctx context.Context, e *env, title string, o throughputOpts, runs int) bool {
	fmt.Printf("\n== %s\n", title)
	var results []throughputResult
	if !rounds(ctx, e, runs, func() (throughputResult, error) { return runThroughput(ctx, e, o) }, func(i int, bg float64, r throughputResult) {
		r.Background = bg
		results = append(results, r)
		status := "ok"
		if p := r.problems(); p != "" {
			status = "PROBLEM: " + p
			exitCode = 1
		}
		extra := ""
		if o.mode == "leader" {
			extra = "  rebuild " + fmtDur(r.Rebuild)
		}
		fmt.Printf("  run %d: [bg %s] %6.0f jobs/s  %d jobs in %s  first run %s%s  longest gap %s  cpu: machine %s, client %s/job, rest %s/job  %s\n",
			i, fpct(r.Background), r.PerSec, r.Done, fmtDur(r.Elapsed), fmtDur(r.FirstRun), extra, fmtDur(r.MaxGap),
			fpct(r.CPU.Utilization()), perJob(r.CPU.Self, r.Done), perJob(r.CPU.Others, r.Done), status)
		if len(r.Warnings) > 0 {
			fmt.Printf("         warnings: %v\n", r.Warnings)
			for _, l := range r.WarnLines {
				fmt.Printf("           e.g. %s\n", l)
			}
		}
	}) {
		return false
	}
	if len(results) == 0 {
		return true
	}
	col := func(f func(throughputResult) float64) summary { return summarize(metric(results, f)) }
	rates := metric(results, func(r throughputResult) float64 { return r.PerSec })
	fmt.Printf("  median of %d runs:\n", len(results))
	fmt.Printf("    throughput        %s jobs/s\n", summarize(rates).format(fnum))
	fmt.Printf("    elapsed           %s\n", col(func(r throughputResult) float64 { return float64(r.Elapsed) }).format(fdur))
	if o.mode == "leader" {
		fmt.Printf("    rebuild           %s\n", col(func(r throughputResult) float64 { return float64(r.Rebuild) }).format(fdur))
	}
	fmt.Printf("    first run after   %s\n", col(func(r throughputResult) float64 { return float64(r.FirstRun) }).format(fdur))
	fmt.Printf("    longest gap       %s   (longest time without a finished run)\n", col(func(r throughputResult) float64 { return float64(r.MaxGap) }).format(fdur))
	fmt.Printf("    machine CPU       %s   (of %d CPUs)\n", col(func(r throughputResult) float64 { return r.CPU.Utilization() }).format(fpct), results[0].CPU.NumCPUs)
	fmt.Printf("    client CPU/job    %s   (this process: scheduler + database/sql + driver)\n",
		col(func(r throughputResult) float64 { return float64(r.CPU.Self) / float64(max(r.Done, 1)) }).format(fdur))
	fmt.Printf("    other CPU/job     %s   (the rest of the machine: the database server)\n",
		col(func(r throughputResult) float64 { return float64(r.CPU.Others) / float64(max(r.Done, 1)) }).format(fdur))
	if results[0].PGCPU != nil {
		fmt.Printf("    PostgreSQL CPU/job %s   (the server's processes, from /proc)\n",
			col(func(r throughputResult) float64 { return float64(r.PGCPU.Total) / float64(max(r.Done, 1)) }).format(fdur))
	}
	mi := medianIndex(rates)
	m := results[mi]
	if m.PGCPU != nil {
		printPGCPU(m.PGCPU, m.Done, mi+1)
	}
	if m.Server != nil {
		fmt.Printf("    server            %s transactions/job, %s connections opened/run  (pg_stat_database, run %d)\n",
			fnum(float64(m.Server.XactCommit+m.Server.XactRollback)/float64(max(m.Done, 1))),
			col(func(r throughputResult) float64 {
				if r.Server == nil {
					return 0
				}
				return float64(r.Server.Sessions)
			}).format(fnum), mi+1)
		printPGSS(m.Server, m.Done, o.dialect)
	}
	if m.Trace != nil {
		printTrace(m.Trace, m.Done, o.dialect)
	}
	return true
}

func (r throughputResult) problems() string {
	var p []string
	if r.TimedOut {
		p = append(p, fmt.Sprintf("timed out with %d of %d finished", r.Done, r.Jobs))
	}
	if r.Dups > 0 {
		why := ""
		if r.Warnings["run_finish_failed"] > 0 {
			why = fmt.Sprintf(" (%d finish writes failed: such a run is retried after its lock goes stale — at-least-once by design)", r.Warnings["run_finish_failed"])
		}
		p = append(p, fmt.Sprintf("%d jobs ran more than once%s", r.Dups, why))
	}
	if r.Missing > 0 && !r.TimedOut {
		p = append(p, fmt.Sprintf("%d jobs never ran", r.Missing))
	}
	if r.DB.Runs != int64(r.Jobs) || r.DB.Succeeded != int64(r.Jobs) || r.DB.Unfinished != 0 {
		p = append(p, fmt.Sprintf("tables: %d run rows, %d succeeded, %d jobs still locked or pending (want %d, %d, 0)",
			r.DB.Runs, r.DB.Succeeded, r.DB.Unfinished, r.Jobs, r.Jobs))
	}
	return strings.Join(p, "; ")
}

func printPGSS(s *pgStats, jobs int64, dialect string) {
	if len(s.Stmts) == 0 {
		return
	}
	label := labelsFor(dialect)
	var total float64
	for _, st := range s.Stmts {
		total += st.TotalMS
	}
	// Batched statements run once per hundreds of jobs: they are shown by
	// their share of the time, however rare.
	fmt.Printf("    pg_stat_statements (server execution time only; statements with ≥ 0.01 calls/job or ≥ 1%% of the time):\n")
	fmt.Printf("      %-22s %10s %9s %10s %9s %7s\n", "statement", "calls/job", "rows/call", "mean", "total", "share")
	var calls float64
	for _, st := range s.Stmts {
		cpj := float64(st.Calls) / float64(max(jobs, 1))
		calls += cpj
		if cpj < 0.01 && st.TotalMS < total/100 {
			continue
		}
		rpc := 0.0
		if st.Calls > 0 {
			rpc = float64(st.Rows) / float64(st.Calls)
		}
		fmt.Printf("      %-22s %10.3f %9.1f %10s %9s %6.1f%%\n", label(st.Query), cpj, rpc,
			fmtDur(time.Duration(st.TotalMS/float64(max(st.Calls, 1))*1e6)), fmtDur(time.Duration(st.TotalMS*1e6)), st.TotalMS/total*100)
	}
	fmt.Printf("      %-22s %10.3f  (statements per job, BEGIN/COMMIT included)\n", "total", calls)
}

func printTrace(t *traceSnapshot, jobs int64, dialect string) {
	label := labelsFor(dialect)
	fmt.Printf("    client trace: %s transactions/job, %d physical connections opened; statements (round trip as the caller sees it):\n",
		fnum(float64(t.Commits+t.Rollbacks)/float64(max(jobs, 1))), t.Connects)
	fmt.Printf("      %-22s %10s %9s %10s %9s\n", "statement", "calls/job", "rows/call", "mean", "total")
	var calls float64
	for _, st := range t.sorted(label) {
		cpj := float64(st.Calls) / float64(max(jobs, 1))
		if cpj < 0.01 {
			continue
		}
		calls += cpj
		rpc := 0.0
		if st.Calls > 0 {
			rpc = float64(st.Rows) / float64(st.Calls)
		}
		fmt.Printf("      %-22s %10.3f %9.1f %10s %9s\n", st.Name, cpj, rpc, fmtDur(st.Total/time.Duration(max(st.Calls, 1))), fmtDur(st.Total))
	}
	fmt.Printf("      %-22s %10.3f  (round trips per job)\n", "total", calls)
}

func submitScenario(ctx context.Context, e *env, title, dialect string, creates, submitters, runs int) bool {
	fmt.Printf("\n== %s\n", title)
	var results []submitResult
	if !rounds(ctx, e, runs, func() (submitResult, error) { return runSubmit(ctx, e, dialect, creates, submitters) }, func(i int, bg float64, r submitResult) {
		r.Background = bg
		results = append(results, r)
		status := "ok"
		if r.Errors > 0 {
			status = fmt.Sprintf("PROBLEM: %d creates failed", r.Errors)
			exitCode = 1
		}
		conns := ""
		if r.Server != nil {
			conns = fmt.Sprintf("  %d connections opened", r.Server.Sessions)
		}
		fmt.Printf("  run %d: [bg %s] p50 %s  p99 %s  max %s  %6.0f creates/s  cpu: machine %s, client %s/create, rest %s/create%s  %s\n",
			i, fpct(r.Background), fmtDur(r.P50), fmtDur(r.P99), fmtDur(r.Max), r.PerSec, fpct(r.CPU.Utilization()),
			perJob(r.CPU.Self, int64(r.Creates)), perJob(r.CPU.Others, int64(r.Creates)), conns, status)
	}) {
		return false
	}
	if len(results) == 0 {
		return true
	}
	col := func(f func(submitResult) float64) summary { return summarize(metric(results, f)) }
	fmt.Printf("  median of %d runs:\n", len(results))
	fmt.Printf("    p50 latency       %s\n", col(func(r submitResult) float64 { return float64(r.P50) }).format(fdur))
	fmt.Printf("    p99 latency       %s\n", col(func(r submitResult) float64 { return float64(r.P99) }).format(fdur))
	fmt.Printf("    throughput        %s creates/s\n", col(func(r submitResult) float64 { return r.PerSec }).format(fnum))
	rates := metric(results, func(r submitResult) float64 { return r.PerSec })
	m := results[medianIndex(rates)]
	if m.PGCPU != nil {
		fmt.Printf("    PostgreSQL CPU    %s/create\n", perJob(m.PGCPU.Total, int64(m.Creates)))
	}
	if m.Server != nil {
		fmt.Printf("    server            %s transactions/create, %d connections opened\n",
			fnum(float64(m.Server.XactCommit+m.Server.XactRollback)/float64(m.Creates)), m.Server.Sessions)
		printPGSS(m.Server, int64(m.Creates), dialect)
	}
	if m.Trace != nil {
		printTrace(m.Trace, int64(m.Creates), dialect)
	}
	return true
}

func memoryScenario(ctx context.Context, e *env, title string, o memoryOpts, runs int) bool {
	fmt.Printf("\n== %s\n", title)
	fmt.Printf("   jobs due %s..%s after the insert; ScheduleHorizon %s; every run in a child process\n", o.Offset, o.Offset+o.Spread, o.Horizon)
	var results []memoryResult
	if !rounds(ctx, e, runs, func() (memoryResult, error) { return runMemoryChild(ctx, e, o) }, func(i int, bg float64, r memoryResult) {
		r.Background = bg
		results = append(results, r)
		var ref []string
		for _, x := range r.Refreshes {
			s := fmt.Sprintf("%s (%d pages, %d rows)", fmtDur(x.Took), x.Pages, x.Rows)
			if x.Took < 0 {
				s = fmt.Sprintf("UNFINISHED after %s (%d pages, %d rows so far)", fmtDur(-x.Took), x.Pages, x.Rows)
			}
			ref = append(ref, s)
		}
		var rel []string
		for _, x := range r.Reloads {
			rel = append(rel, fmt.Sprintf("%s/%d rows", fmtDur(x.Took), x.Rows))
		}
		status := "ok"
		if r.HandlerRuns != 0 {
			status = fmt.Sprintf("PROBLEM: %d jobs ran (they were not due)", r.HandlerRuns)
		}
		fmt.Printf("  run %d: [bg %s] insert %s  rebuild %s (%s entries)  RSS before %s, rebuilt %s, end %s  VmHWM %s  heap in use %s → %s → %s  %s\n",
			i, fpct(r.Background), fmtDur(r.Insert), fmtDur(r.Rebuild), r.Entries, mib(r.MemBefore.RSS), mib(r.MemRebuilt.RSS), mib(r.MemEnd.RSS),
			mib(r.MemEnd.HWM), mib(int64(r.MemBefore.HeapInuse)), mib(int64(r.MemRebuilt.HeapInuse)), mib(int64(r.MemEnd.HeapInuse)), status)
		fmt.Printf("         refreshes: %s\n", strings.Join(ref, ", "))
		if len(rel) > 8 {
			rel = append(rel[:8], fmt.Sprintf("… (%d in all)", len(r.Reloads)))
		}
		fmt.Printf("         reloads (DueWindow): %s\n", strings.Join(rel, ", "))
		if len(r.Warnings) > 0 {
			fmt.Printf("         warnings: %v %v\n", r.Warnings, r.WarnLines)
		}
	}) {
		return false
	}
	if len(results) == 0 {
		return true
	}
	col := func(f func(memoryResult) float64) summary { return summarize(metric(results, f)) }
	first := func(r memoryResult) float64 {
		if len(r.Refreshes) == 0 {
			return 0
		}
		return float64(r.Refreshes[0].Took)
	}
	steady := func(r memoryResult) float64 {
		var v []float64
		for _, x := range r.Refreshes[min(1, len(r.Refreshes)):] {
			if x.Took > 0 {
				v = append(v, float64(x.Took))
			}
		}
		return summarize(v).Median
	}
	reload := func(r memoryResult) float64 {
		var v []float64
		for _, x := range r.Reloads {
			v = append(v, float64(x.Took))
		}
		return summarize(v).Median
	}
	fmt.Printf("  median of %d runs:\n", len(results))
	fmt.Printf("    bulk insert       %s\n", col(func(r memoryResult) float64 { return float64(r.Insert) }).format(fdur))
	fmt.Printf("    full rebuild      %s   (Lead start → schedule_rebuilt)\n", col(func(r memoryResult) float64 { return float64(r.Rebuild) }).format(fdur))
	fmt.Printf("    RSS before        %s\n", col(func(r memoryResult) float64 { return float64(r.MemBefore.RSS) }).format(fmib))
	fmt.Printf("    RSS rebuilt       %s\n", col(func(r memoryResult) float64 { return float64(r.MemRebuilt.RSS) }).format(fmib))
	fmt.Printf("    RSS end           %s\n", col(func(r memoryResult) float64 { return float64(r.MemEnd.RSS) }).format(fmib))
	fmt.Printf("    VmHWM             %s\n", col(func(r memoryResult) float64 { return float64(r.MemEnd.HWM) }).format(fmib))
	fmt.Printf("    Go heap in use    %s → %s → %s\n",
		col(func(r memoryResult) float64 { return float64(r.MemBefore.HeapInuse) }).format(fmib),
		col(func(r memoryResult) float64 { return float64(r.MemRebuilt.HeapInuse) }).format(fmib),
		col(func(r memoryResult) float64 { return float64(r.MemEnd.HeapInuse) }).format(fmib))
	fmt.Printf("    first refresh     %s   (re-reads from the rebuild's high-water mark − RefreshOverlap)\n", col(first).format(fdur))
	fmt.Printf("    later refreshes   %s\n", col(steady).format(fdur))
	fmt.Printf("    reload (DueWindow)%s\n", " "+col(reload).format(fdur))
	last := results[len(results)-1]
	if last.Plan != "" {
		fmt.Printf("    plan of one refresh page with the cursor mid-table (run %d; took %s):\n", len(results), fmtDur(last.PlanRun))
		for _, l := range strings.Split(strings.TrimSpace(last.Plan), "\n") {
			fmt.Printf("      %s\n", l)
		}
	}
	return true
}

func printPGCPU(u *pgCPUUse, jobs int64, run int) {
	var parts []string
	for _, k := range sortedKeys(u.ByKind) {
		parts = append(parts, fmt.Sprintf("%s %s", k, perJob(u.ByKind[k], jobs)))
	}
	fmt.Printf("      by process kind (run %d, per job): %s\n", run, strings.Join(parts, ", "))
}
