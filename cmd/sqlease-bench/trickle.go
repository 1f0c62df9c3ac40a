package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// trickleScenario measures what a steady trickle of jobs costs, rather
// than a backlog: -trickle-jobs one-off no-op jobs fall due one every
// 1/-trickle-rate seconds, the first a second after the seed; claim mode (1
// worker) and leader mode (-trickle-modes) run them in interleaved rounds.
// The figure is CPU per job over the run (from dispatch start to the last finish write,
// idle time included): client = this process, server = every PostgreSQL
// process; and the machine's utilization, since other load inflates both.
func trickleScenario(ctx context.Context, e *env, dialect string, modes []string, jobs int, rate float64, runs int, tuning schedTuning, timeout time.Duration) bool {
	for _, m := range modes {
		if m != "claim" && m != "leader" {
			fmt.Printf("\n== trickle — unknown mode %q in -trickle-modes (claim, leader)\n", m)
			exitCode = 1
			return true
		}
	}
	step := time.Duration(float64(time.Second) / rate)
	fmt.Printf("\n== trickle — %s, %d one-off no-op jobs falling due one every %s (%.0f/s), interleaved: %s (claim: 1 worker)\n", dialect, jobs, step, rate,
		strings.Join(modes, ", "))
	clients, servers, utils := make([][]float64, len(modes)), make([][]float64, len(modes)), make([][]float64, len(modes))
	results := make([][]throughputResult, len(modes))
	for r := 1; r <= runs; r++ {
		for i, mode := range modes {
			bg := settle(e.settleBusy, e.settleWait)
			o := throughputOpts{dialect: dialect, mode: mode, workers: 1, jobs: jobs, tuning: tuning, timeout: timeout,
				trickle: step, trickleAfter: time.Second}
			res, err := runThroughput(ctx, e, o)
			if err != nil {
				fmt.Printf("  run %d: %-7s ERROR %v\n", r, mode, err)
				exitCode = 1
				return ctx.Err() == nil
			}
			if p := res.problems(); p != "" {
				fmt.Printf("  run %d: %-7s exactly-once check: %s\n", r, mode, p)
				exitCode = 1
			}
			client := float64(res.CPU.Self) / float64(max(res.Done, 1))
			server := -1.0
			if res.PGCPU != nil {
				server = float64(res.PGCPU.Total) / float64(max(res.Done, 1))
				servers[i] = append(servers[i], server)
			}
			clients[i] = append(clients[i], client)
			results[i] = append(results[i], res)
			utils[i] = append(utils[i], res.CPU.Utilization())
			srv := "n/a"
			if server >= 0 {
				srv = fmtDur(time.Duration(server))
			}
			stmts := ""
			if res.Server != nil {
				// Statements and transactions per job (pg_stat_statements
				// counts BEGIN and COMMIT as statements too).
				// Claims: the statements that lock due jobs (SKIP LOCKED);
				// a leader claiming ahead serves several jobs with one.
				var calls, claims int64
				for _, st := range res.Server.Stmts {
					calls += st.Calls
					if strings.Contains(st.Query, "SKIP LOCKED") {
						claims += st.Calls
					}
				}
				stmts = fmt.Sprintf("  statements/job %.2f (claims %.2f), commits/job %.2f", float64(calls)/float64(max(res.Done, 1)),
					float64(claims)/float64(max(res.Done, 1)), float64(res.Server.XactCommit)/float64(max(res.Done, 1)))
			}
			late := ""
			if len(res.Late) > 0 {
				// Not late for nothing: a start that waits for others to
				// share a wake-up would look cheap here.
				late = fmt.Sprintf("  start delay p50 %s p99 %s", fmtDur(time.Duration(quantile(res.Late, 0.5)*1e9)), fmtDur(time.Duration(quantile(res.Late, 0.99)*1e9)))
			}
			fmt.Printf("  run %d: [bg %2.0f%%] %-7s %6d jobs in %s (%.0f/s)  CPU per job: client %s, server %s  machine %s%s%s\n",
				r, bg*100, mode, res.Done, res.Elapsed.Round(time.Millisecond), res.PerSec, fmtDur(time.Duration(client)), srv,
				fpct(res.CPU.Utilization()), late, stmts)
		}
	}
	fmt.Printf("  medians of %d runs [min .. max]:\n", runs)
	for i, mode := range modes {
		line := fmt.Sprintf("    %-7s client %s/job", mode, summarize(clients[i]).format(fdur))
		if len(servers[i]) > 0 {
			line += fmt.Sprintf("  server %s/job", summarize(servers[i]).format(fdur))
		}
		fmt.Printf("%s  machine %s\n", line, summarize(utils[i]).format(fpct))
	}
	// Where the server's time went, in each mode's median run by client
	// CPU: a trickle's cost is mostly the database's.
	for i, mode := range modes {
		mi := medianIndex(clients[i])
		m := results[i][mi]
		if m.PGCPU == nil && m.Server == nil {
			continue
		}
		fmt.Printf("  %s, run %d:\n", mode, mi+1)
		if m.PGCPU != nil {
			printPGCPU(m.PGCPU, m.Done, mi+1)
		}
		if m.Server != nil {
			printPGSS(m.Server, m.Done, dialect)
		}
	}
	return true
}
