package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sqlease/sqlease/sqlstore"
)

// timeline records, for one claim or leader throughput run (-timeline),
// every statement the dispatcher's pool sends (its start, its end as the
// caller sees it, its rows) and every handler call, and then says where the
// run's wall time went: how much of it had a claim in flight, a finish in
// flight, both, or neither, and how long the handlers waited between
// batches. It answers whether a backlog waits on round trips or on CPU.
type timeline struct {
	label func(string) string

	mu    sync.Mutex
	stmts []tlStmt
	calls []int64 // handler calls, unix nanos
}

type tlStmt struct {
	name       string
	start, end int64 // unix nanos
	rows       int
}

func newTimeline(dialect string) *timeline {
	return &timeline{label: labelsFor(dialect), stmts: make([]tlStmt, 0, 4096), calls: make([]int64, 0, 1<<16)}
}

// query is a tracer's onQuery.
func (t *timeline) query(q string, rows int, start time.Time, took time.Duration) {
	name := t.label(q)
	t.mu.Lock()
	t.stmts = append(t.stmts, tlStmt{name: name, start: start.UnixNano(), end: start.Add(took).UnixNano(), rows: rows})
	t.mu.Unlock()
}

// call records a handler call.
func (t *timeline) call() {
	now := time.Now().UnixNano()
	t.mu.Lock()
	t.calls = append(t.calls, now)
	t.mu.Unlock()
}

// tlKind says which part of dispatch a statement is: a claim, a finish,
// or something else (heartbeats, transactions' BEGIN and COMMIT, the
// lease).
func tlKind(name string) string {
	switch {
	case strings.HasPrefix(name, "Claim"):
		return "claim"
	case strings.HasPrefix(name, "Finish"):
		return "finish"
	case strings.HasPrefix(name, "StartRuns"):
		return "start"
	}
	return "other"
}

// report prints the analysis of the run between from and to, and writes
// every event to path (CSV: kind, name, start and end in µs from from,
// rows) when path is not empty.
func (t *timeline) report(from, to time.Time, path string) {
	t.mu.Lock()
	stmts := slices.Clone(t.stmts)
	calls := slices.Clone(t.calls)
	t.mu.Unlock()
	f0, f1 := from.UnixNano(), to.UnixNano()
	wall := float64(f1 - f0)
	if wall <= 0 {
		return
	}
	sort.Slice(stmts, func(i, j int) bool { return stmts[i].start < stmts[j].start })
	slices.Sort(calls)

	// Per statement: calls, rows, durations.
	type agg struct {
		n, rows int
		durs    []float64
	}
	by := map[string]*agg{}
	var names []string
	for _, s := range stmts {
		if s.end < f0 || s.start > f1 {
			continue
		}
		a := by[s.name]
		if a == nil {
			a = &agg{}
			by[s.name] = a
			names = append(names, s.name)
		}
		a.n++
		a.rows += s.rows
		a.durs = append(a.durs, float64(s.end-s.start)/1e3)
	}
	sort.Slice(names, func(i, j int) bool { return by[names[i]].n > by[names[j]].n })
	fmt.Printf("    timeline over %s: statement  calls  rows/call  p50  mean  max (µs, round trip as the caller sees it)\n", fmtDur(to.Sub(from)))
	for _, n := range names {
		a := by[n]
		slices.Sort(a.durs)
		var sum float64
		for _, d := range a.durs {
			sum += d
		}
		fmt.Printf("      %-22s %6d %9.1f %7.0f %7.0f %7.0f\n", n, a.n, float64(a.rows)/float64(a.n),
			a.durs[len(a.durs)/2], sum/float64(len(a.durs)), a.durs[len(a.durs)-1])
	}

	// Wall time by what was in flight, on a 10 µs grid.
	const step = int64(10 * time.Microsecond)
	cells := int((f1-f0)/step) + 1
	claimAt, finishAt, otherAt := make([]bool, cells), make([]bool, cells), make([]bool, cells)
	mark := func(b []bool, s tlStmt) {
		a, z := max(s.start, f0), min(s.end, f1)
		for c := (a - f0) / step; c <= (z-f0)/step && int(c) < cells; c++ {
			b[c] = true
		}
	}
	for _, s := range stmts {
		switch tlKind(s.name) {
		case "claim":
			mark(claimAt, s)
		case "finish":
			mark(finishAt, s)
		default:
			mark(otherAt, s)
		}
	}
	var onlyClaim, onlyFinish, both, other, none int
	for c := range cells {
		switch {
		case claimAt[c] && finishAt[c]:
			both++
		case claimAt[c]:
			onlyClaim++
		case finishAt[c]:
			onlyFinish++
		case otherAt[c]:
			other++
		default:
			none++
		}
	}
	pct := func(n int) string { return fmt.Sprintf("%4.1f%%", 100*float64(n)/float64(cells)) }
	fmt.Printf("      wall time: claim alone %s, finish alone %s, claim and finish %s, another statement only %s, nothing in flight %s\n",
		pct(onlyClaim), pct(onlyFinish), pct(both), pct(other), pct(none))

	// The handlers: gaps between consecutive calls longer than 100 µs
	// (a no-op run takes a few µs: a longer gap is a wait for work).
	var idle time.Duration
	var gaps int
	prev := f0
	for _, c := range calls {
		if c < f0 || c > f1 {
			continue
		}
		if g := c - prev; g > int64(100*time.Microsecond) {
			idle += time.Duration(g)
			gaps++
		}
		prev = c
	}
	fmt.Printf("      handlers: %d calls, %d waits over 100 µs totalling %s (%.1f%% of the run)\n",
		len(calls), gaps, fmtDur(idle), 100*float64(idle)/wall)

	if path == "" {
		return
	}
	if err := t.write(path, f0, stmts, calls); err != nil {
		fmt.Printf("      (timeline not written: %v)\n", err)
	}
}

func (t *timeline) write(path string, f0 int64, stmts []tlStmt, calls []int64) error {
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(fh)
	fmt.Fprintln(w, "kind,name,start_us,end_us,rows")
	for _, s := range stmts {
		fmt.Fprintf(w, "%s,%s,%.1f,%.1f,%d\n", tlKind(s.name), s.name, float64(s.start-f0)/1e3, float64(s.end-f0)/1e3, s.rows)
	}
	for _, c := range calls {
		fmt.Fprintf(w, "handler,,%.1f,%.1f,1\n", float64(c-f0)/1e3, float64(c-f0)/1e3)
	}
	if err := w.Flush(); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

// printHOT prints, for the jobs and runs tables, the row versions the run
// wrote (seed included) and how many of its updates were HOT (no index
// entry written), from pg_stat_user_tables. The dispatcher's pools are
// closed by then: a backend reports its counters as it exits, so the query
// waits a little for them.
func printHOT(ctx context.Context, st *sqlstore.Store) {
	time.Sleep(300 * time.Millisecond)
	rows, err := st.DB().QueryContext(ctx, `SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
WHERE relname IN ($1, $2) ORDER BY relname`, prefix+"_jobs", prefix+"_runs")
	if err != nil {
		fmt.Printf("      (table statistics unavailable: %v)\n", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var ins, upd, hot int64
		if err := rows.Scan(&name, &ins, &upd, &hot); err != nil {
			fmt.Printf("      (table statistics unavailable: %v)\n", err)
			return
		}
		share := 0.0
		if upd > 0 {
			share = 100 * float64(hot) / float64(upd)
		}
		fmt.Printf("      %-14s inserts %6d  updates %6d, HOT %6d (%.0f%%)\n", name, ins, upd, hot, share)
	}
}
