package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/scheduler"
)

// outputLimit is scheduler.Config.OutputLimit for --run-output-limit, where
// 0 keeps none (the scheduler's 0 is its default).
func outputLimit(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// runsCmd is `sqlease jobs runs NAME`: the job's run ledger, newest first,
// with each run's kept output. As JSON (GET /v1/jobs/{name}/runs's body) by
// default, or --text: a line per run and its output indented under it.
func runsCmd(env Env, withSched func(*cobra.Command, func(context.Context, *scheduler.Scheduler) (any, error)) error) *cobra.Command {
	var p page
	var text bool
	c := &cobra.Command{
		Use:   "runs NAME",
		Short: "Show a job's runs, newest first, with their output (as GET /v1/jobs/{name}/runs; --text for reading)",
		Args:  oneArg("NAME"),
	}
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := p.check(); err != nil {
			return err
		}
		limit, after := p.limit, p.after
		var at time.Time
		var attempt int
		if after != "" {
			t, a, ok := strings.Cut(after, "/")
			var err error
			if at, err = time.Parse(time.RFC3339Nano, t); err != nil || !ok {
				return usagef("after: must be the next value of a previous page (RFC 3339 time/attempt), got %q", after)
			}
			if _, err := fmt.Sscanf(a, "%d", &attempt); err != nil {
				return usagef("after: must be the next value of a previous page (RFC 3339 time/attempt), got %q", after)
			}
		}
		return withSched(cmd, func(ctx context.Context, s *scheduler.Scheduler) (any, error) {
			var runs []sqlease.Run
			var err error
			if after != "" {
				runs, err = s.RunsBefore(ctx, args[0], at, attempt, limit+1)
			} else {
				runs, err = s.Runs(ctx, args[0], limit+1)
			}
			if err != nil {
				return nil, err
			}
			if len(runs) == 0 {
				if _, err := s.Job(ctx, args[0]); err != nil {
					return nil, err
				}
			}
			out := httpapi.RunList{Runs: []httpapi.Run{}}
			if len(runs) > limit {
				runs = runs[:limit]
				last := runs[limit-1]
				out.Next = last.ScheduledFor.UTC().Format(time.RFC3339Nano) + "/" + fmt.Sprint(last.Attempt)
			}
			if text {
				printRuns(env.Stdout, runs, out.Next)
				return nil, nil
			}
			for _, r := range runs {
				out.Runs = append(out.Runs, httpapi.RunOut(r))
			}
			return out, nil
		})
	}
	p.flags(c, 20, "list the runs before this one (the previous page's next)")
	c.Flags().BoolVar(&text, "text", false, "print a line per run and its output indented under it, instead of JSON")
	addFlags(c.Flags(), false)
	return c
}

// printRuns writes runs for reading: one line per run, then its error, its
// output and its checkpoint, each line indented.
func printRuns(w io.Writer, runs []sqlease.Run, next string) {
	if len(runs) == 0 {
		fmt.Fprintln(w, "no runs")
	}
	for _, r := range runs {
		line := fmt.Sprintf("%s attempt %d %s epoch %d holder %s", r.ScheduledFor.UTC().Format(time.RFC3339Nano),
			r.Attempt, r.Outcome, r.Epoch, r.Holder)
		if !r.FinishedAt.IsZero() {
			line += " took " + r.FinishedAt.Sub(r.StartedAt).Round(time.Millisecond).String()
		}
		fmt.Fprintln(w, line)
		if r.Error != "" {
			fmt.Fprintln(w, "    error: "+printable(r.Error))
		}
		if r.Output != "" {
			fmt.Fprintln(w, "    output:")
			for _, l := range strings.Split(strings.TrimSuffix(printable(r.Output), "\n"), "\n") {
				fmt.Fprintln(w, "      "+l)
			}
		}
		if cp := httpapi.RunOut(r).Checkpoint; cp != nil { // as the API shows it
			fmt.Fprintln(w, "    checkpoint: "+printable(string(cp)))
		}
	}
	if next != "" {
		fmt.Fprintf(w, "more: --after %s\n", next)
	}
}

// printable replaces the control characters of s (but tabs and newlines)
// with U+FFFD: an action's output must not drive the reader's terminal.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || (r >= 0x20 && r != 0x7f && (r < 0x80 || r > 0x9f)) {
			return r
		}
		return '\uFFFD'
	}, s)
}
