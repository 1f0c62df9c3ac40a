package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/action"
	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// jobsCmd administers jobs directly in the database: any node's leader (or
// claim workers) picks changes up, exactly as with the HTTP API. Input and
// output use the API's JSON.
func jobsCmd(env Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "jobs add|list|get|runs|pause|resume|trigger|delete",
		Short: "Create, inspect and change jobs (the HTTP API's JSON, straight to the database)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("jobs: missing subcommand; see sqlease jobs --help")
		},
	}
	withSched := func(cmd *cobra.Command, fn func(ctx context.Context, s *scheduler.Scheduler) (any, error)) error {
		return withStore(env, cmd, func(ctx context.Context, st *sqlstore.Store) (any, error) {
			s, err := scheduler.New(scheduler.Config{Store: st, ValidateAction: action.ValidateJSON})
			if err != nil {
				return nil, err
			}
			return fn(ctx, s)
		})
	}

	var file string
	add := &cobra.Command{
		Use:   "add -f FILE|-",
		Short: "Create a job from its JSON (as POST /v1/jobs), or many from a JSON array or NDJSON (as POST /v1/jobs:batch: all or nothing); idempotent for the same content",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := readFileFlag(env, file, 0)
			if err != nil {
				return err
			}
			jobs, err := httpapi.DecodeJobs(bytes.NewReader(raw), scheduler.MaxCreateMany)
			if err != nil {
				return usageError{err}
			}
			// The nodes' one policy on commands, as the operator's
			// environment states it (SQLEASE_ALLOW_EXEC=false refuses them
			// here too); a node that refuses commands does not run them
			// whoever wrote the row.
			policy := cliExecPolicy(env)
			for i, j := range jobs {
				if err := policy.CheckAction(j.Action); err != nil {
					if len(jobs) > 1 {
						err = fmt.Errorf("jobs[%d]: %w", i, err)
					}
					return err
				}
			}
			if len(jobs) > 1 || bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")) {
				// Many jobs: one transaction, all or nothing.
				return withSched(cmd, func(ctx context.Context, s *scheduler.Scheduler) (any, error) {
					res, err := s.CreateMany(ctx, jobs)
					if err != nil {
						return nil, err
					}
					return httpapi.BatchOut(res), nil
				})
			}
			j := jobs[0]
			return withSched(cmd, func(ctx context.Context, s *scheduler.Scheduler) (any, error) {
				job, created, err := s.Create(ctx, j)
				if err != nil {
					return nil, err
				}
				if !created {
					fmt.Fprintf(env.Stderr, "job %q already exists with the same content\n", job.Name)
				}
				return httpapi.JobOut(job), nil
			})
		},
	}
	add.Flags().StringVarP(&file, "file", "f", "", "the job's JSON (or an array or NDJSON of jobs), or - for standard input")

	var listPage page
	var listText bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List jobs by name (JSON as GET /v1/jobs; --text for a table)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := listPage.check(); err != nil {
				return err
			}
			limit := listPage.limit
			return withSched(cmd, func(ctx context.Context, s *scheduler.Scheduler) (any, error) {
				jobs, err := s.Jobs(ctx, listPage.after, limit)
				if err != nil {
					return nil, err
				}
				out := httpapi.JobList{Jobs: []httpapi.Job{}}
				for _, j := range jobs {
					out.Jobs = append(out.Jobs, httpapi.JobOut(j))
				}
				if len(jobs) == limit {
					out.Next = jobs[len(jobs)-1].Name
				}
				if listText {
					return textOut(func(w io.Writer) error { return printJobs(w, out) }), nil
				}
				return out, nil
			})
		},
	}
	listPage.flags(list, 100, "list names after this one (the previous page's next)")
	list.Flags().BoolVar(&listText, "text", false, "print a table (name, state, schedule, next and last run, attempts, lock holder) instead of JSON")

	var getText bool
	one := func(use, short string, fn func(ctx context.Context, s *scheduler.Scheduler, name string) (any, error)) *cobra.Command {
		c := &cobra.Command{Use: use + " NAME", Short: short, Args: oneArg("NAME")}
		c.RunE = func(cmd *cobra.Command, args []string) error {
			return withSched(cmd, func(ctx context.Context, s *scheduler.Scheduler) (any, error) { return fn(ctx, s, args[0]) })
		}
		addFlags(c.Flags(), false)
		return c
	}
	get := one("get", "Show a job and its latest runs", func(ctx context.Context, s *scheduler.Scheduler, name string) (any, error) {
		j, err := s.Job(ctx, name)
		if err != nil {
			return nil, err
		}
		runs, err := s.Runs(ctx, name, 10)
		if err != nil {
			return nil, err
		}
		if getText {
			return textOut(func(w io.Writer) error { return printJob(w, httpapi.JobOut(j), runs) }), nil
		}
		out := struct {
			httpapi.Job
			Runs []httpapi.Run `json:"runs"`
		}{Job: httpapi.JobOut(j), Runs: []httpapi.Run{}}
		for _, r := range runs {
			out.Runs = append(out.Runs, httpapi.RunOut(r))
		}
		return out, nil
	})
	get.Flags().BoolVar(&getText, "text", false, "print the job's fields and its latest runs for reading instead of JSON")
	pause, resume := pauseCmds(withSched)
	trigger := one("trigger", "Make a job due now, once", func(ctx context.Context, s *scheduler.Scheduler, name string) (any, error) {
		j, err := s.Trigger(ctx, name)
		return httpapi.JobOut(j), err
	})
	del := one("delete", "Delete a job (its run ledger stays; its runs' output goes with it)", func(ctx context.Context, s *scheduler.Scheduler, name string) (any, error) {
		if err := s.Delete(ctx, name); err != nil {
			return nil, err
		}
		fmt.Fprintf(env.Stdout, "deleted %s\n", name)
		return nil, nil
	})
	for _, c := range []*cobra.Command{add, list} {
		addFlags(c.Flags(), false)
	}
	cmd.AddCommand(add, list, get, pause, resume, trigger, del, runsCmd(env, withSched))
	return cmd
}

// withStore runs an administrative command on the database of the
// command's configuration, which must exist (openExisting): fn's result is
// printed as indented JSON (a textOut prints itself; nil: nothing), and an
// invalid-input error exits 2.
// readFileFlag reads what the -f FILE|- flag names: the file, or standard
// input for "-", up to max bytes when max > 0 (the caller refuses more, so
// it reads one byte past its bound). A missing flag or a file that cannot be
// read is a usage error.
func readFileFlag(env Env, file string, max int64) ([]byte, error) {
	if file == "" {
		return nil, usagef("file: -f FILE (or - for standard input) is required")
	}
	var r io.Reader = env.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, usagef("file: %v", err)
		}
		defer f.Close()
		r = f
	}
	if max > 0 {
		r = io.LimitReader(r, max)
	}
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, usagef("file: %v", err)
	}
	return raw, nil
}

// page is a list command's paging: --limit, a page's size, and --after,
// the previous page's next.
type page struct {
	limit int
	after string
}

// flags adds --limit (def by default, 1 to 1000) and --after (afterHelp
// says what it lists) to c.
func (p *page) flags(c *cobra.Command, def int, afterHelp string) {
	p.flagsHelp(c, def, "page size (1-1000)", afterHelp)
}

func (p *page) flagsHelp(c *cobra.Command, def int, limitHelp, afterHelp string) {
	c.Flags().IntVar(&p.limit, "limit", def, limitHelp)
	c.Flags().StringVar(&p.after, "after", "", afterHelp)
}

// check is the usage error of a --limit outside 1 to 1000.
func (p *page) check() error {
	if p.limit < 1 || p.limit > 1000 {
		return usagef("limit: must be between 1 and 1000, got %d", p.limit)
	}
	return nil
}

// existingStore opens the database an administrative command's
// configuration names (openExisting: it creates nothing).
func existingStore(env Env, cmd *cobra.Command) (*sqlstore.Store, error) {
	cfg, err := load(cmd.Flags(), env.Getenv, false)
	if err != nil {
		return nil, err
	}
	return openExisting(cmd.Context(), cmd.CommandPath(), cfg.DB, cfg.TablePrefix)
}

func withStore(env Env, cmd *cobra.Command, fn func(ctx context.Context, st *sqlstore.Store) (any, error)) error {
	st, err := existingStore(env, cmd)
	if err != nil {
		return err
	}
	defer st.DB().Close()
	out, err := fn(cmd.Context(), st)
	if errors.Is(err, sqlease.ErrInvalidConfig) || errors.Is(err, sqlease.ErrInvalidName) {
		return usageError{err}
	}
	if err != nil || out == nil {
		return err
	}
	if t, ok := out.(textOut); ok {
		return t(env.Stdout)
	}
	enc := json.NewEncoder(env.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// cliExecPolicy is the exec policy of the CLI's writes: the operator's
// SQLEASE_ALLOW_EXEC (the CLI listens nowhere: only an explicit false
// refuses).
func cliExecPolicy(env Env) action.ExecPolicy {
	return action.NewExecPolicy(env.Getenv("SQLEASE_ALLOW_EXEC"), true, true)
}

// pauseCmds are jobs pause and jobs resume: one job by name, or with
// --prefix every job whose name starts with it in one statement (all or
// nothing, as POST /v1/jobs:pause and :resume), answering the count.
func pauseCmds(withSched func(*cobra.Command, func(context.Context, *scheduler.Scheduler) (any, error)) error) (pause, resume *cobra.Command) {
	var reason string
	var prefixes [2]string
	mk := func(use, short string, paused bool, prefix *string) *cobra.Command {
		c := &cobra.Command{
			Use:   use + " NAME | --prefix PREFIX",
			Short: short,
			RunE: func(cmd *cobra.Command, args []string) error {
				byPrefix := cmd.Flags().Changed("prefix")
				switch {
				case byPrefix && len(args) > 0:
					return usagef("%s: give a NAME or --prefix, not both", cmd.CommandPath())
				case !byPrefix && len(args) != 1:
					return usagef("%s takes exactly one argument: NAME (or --prefix PREFIX)", cmd.CommandPath())
				}
				return withSched(cmd, func(ctx context.Context, s *scheduler.Scheduler) (any, error) {
					var out httpapi.PrefixResult
					switch {
					case byPrefix && paused:
						n, err := s.PausePrefix(ctx, *prefix, reason)
						out.Paused = &n
						return out, err
					case byPrefix:
						n, err := s.ResumePrefix(ctx, *prefix)
						out.Resumed = &n
						return out, err
					case paused:
						j, err := s.PauseWithReason(ctx, args[0], reason)
						return httpapi.JobOut(j), err
					}
					j, err := s.Resume(ctx, args[0])
					return httpapi.JobOut(j), err
				})
			},
		}
		c.Flags().StringVar(prefix, "prefix", "", "act on every job whose name starts with PREFIX, all or nothing (--prefix \"\" is every job)")
		addFlags(c.Flags(), false)
		return c
	}
	pause = mk("pause", "Pause a job, or every job of a name prefix (a run in flight finishes)", true, &prefixes[0])
	pause.Flags().StringVar(&reason, "reason", "", "why, shown with the job's state (at most 512 bytes)")
	resume = mk("resume", "Resume a paused job, or every job of a name prefix", false, &prefixes[1])
	return pause, resume
}
