package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/sqlstore"
)

// singletonsCmd administers daemon singletons directly in the database, as
// /v1/singletons does; the nodes pick changes up within a second.
func singletonsCmd(env Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "singletons add|list|get|pause|resume|delete",
		Short: "Create, inspect and change singletons (the HTTP API's JSON, straight to the database)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("singletons: missing subcommand; see sqlease singletons --help")
		},
	}
	withAdmin := func(cmd *cobra.Command, fn func(ctx context.Context, a singletonAdmin) (any, error)) error {
		return withStore(env, cmd, func(ctx context.Context, st *sqlstore.Store) (any, error) {
			return fn(ctx, singletonAdmin{store: st, leases: st})
		})
	}

	var file string
	add := &cobra.Command{
		Use:   "add -f FILE|-",
		Short: "Create a singleton from its JSON (as POST /v1/singletons); idempotent for the same content",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := readFileFlag(env, file, httpapi.MaxSingletonBytes+1) // more is refused, not cut
			if err != nil {
				return err
			}
			if err := cliExecPolicy(env).Check("command"); err != nil {
				return err
			}
			return withAdmin(cmd, func(ctx context.Context, a singletonAdmin) (any, error) {
				s, created, err := a.Create(ctx, raw)
				if err == nil && !created {
					fmt.Fprintf(env.Stderr, "singleton %q already exists with the same content\n", s.Name)
				}
				return s, err
			})
		},
	}
	add.Flags().StringVarP(&file, "file", "f", "", "the singleton's JSON, or - for standard input")
	var p page
	var text bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List singletons with their status, holder and epoch (all of them, read a page at a time; --limit for one page; --text for a table)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if p.limit < 0 || p.limit > httpapi.MaxListLimit {
				return usagef("limit: must be between 1 and %d (or 0 for all), got %d", httpapi.MaxListLimit, p.limit)
			}
			return withAdmin(cmd, func(ctx context.Context, a singletonAdmin) (any, error) {
				out, err := listSingletons(ctx, a, p.after, p.limit)
				if err != nil || !text {
					return out, err
				}
				return textOut(func(w io.Writer) error { return printSingletons(w, out) }), nil
			})
		},
	}
	p.flagsHelp(list, 0, "page size (1-1000); 0 lists them all", "list names after this one (the previous page's next)")
	list.Flags().BoolVar(&text, "text", false, "print a table (name, status, holder, epoch, heartbeat, state saved, restarts) instead of JSON")
	one := func(use, short string, fn func(ctx context.Context, a singletonAdmin, name string) (any, error)) *cobra.Command {
		c := &cobra.Command{Use: use + " NAME", Short: short, Args: oneArg("NAME")}
		c.RunE = func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, func(ctx context.Context, a singletonAdmin) (any, error) { return fn(ctx, a, args[0]) })
		}
		addFlags(c.Flags(), false)
		return c
	}
	get := one("get", "Show a singleton: status, holder, epoch, state, heartbeat", func(ctx context.Context, a singletonAdmin, name string) (any, error) {
		return a.Get(ctx, name)
	})
	pause := one("pause", "Stop a singleton everywhere, keeping its state", func(ctx context.Context, a singletonAdmin, name string) (any, error) {
		return a.SetPaused(ctx, name, true)
	})
	resume := one("resume", "Run a paused singleton again", func(ctx context.Context, a singletonAdmin, name string) (any, error) {
		return a.SetPaused(ctx, name, false)
	})
	del := one("delete", "Stop a singleton everywhere and drop it with its state", func(ctx context.Context, a singletonAdmin, name string) (any, error) {
		if err := a.Delete(ctx, name); err != nil {
			return nil, err
		}
		fmt.Fprintf(env.Stdout, "deleted %s\n", name)
		return nil, nil
	})
	for _, c := range []*cobra.Command{add, list} {
		addFlags(c.Flags(), false)
	}
	cmd.AddCommand(add, list, get, pause, resume, del)
	return cmd
}

// listSingletons reads the singletons after after by name: limit of them
// with next set when more may follow, or every one (limit 0), a page at a
// time.
func listSingletons(ctx context.Context, a singletonAdmin, after string, limit int) (httpapi.SingletonList, error) {
	out := httpapi.SingletonList{Singletons: []httpapi.Singleton{}}
	for from := after; ; {
		n := listPage
		if limit > 0 {
			n = limit - len(out.Singletons)
		}
		page, err := a.Page(ctx, from, n)
		if err != nil {
			return out, err
		}
		out.Singletons = append(out.Singletons, page...)
		switch {
		case limit > 0 && len(page) == n:
			out.Next = page[len(page)-1].Name
			return out, nil
		case len(page) < n:
			return out, nil
		}
		from = page[len(page)-1].Name
	}
}
