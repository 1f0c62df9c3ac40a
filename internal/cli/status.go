package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sqlease/sqlease/sqlstore"
)

// historyLines is how many events status --history shows.
const historyLines = 20

// printHistory prints the latest leadership history of lease.
func printHistory(ctx context.Context, out io.Writer, s *sqlstore.Store, lease string) error {
	events, err := s.LeaseHistory(ctx, lease, 0, historyLines)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nleadership history of %s (newest first):\n", lease)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "AT\tEVENT\tHOLDER\tEPOCH\tREASON")
	for _, e := range events {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", e.At.Format(time.RFC3339Nano), e.Event, e.Holder, e.Epoch, e.Reason)
	}
	if len(events) == 0 {
		fmt.Fprintln(w, "(none)\t\t\t\t")
	}
	return w.Flush()
}

func statusCmd(env Env) *cobra.Command {
	var showHistory string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the leases (holder, epoch, time left), a summary of the jobs and the singletons; --history adds the leadership history",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := load(cmd.Flags(), env.Getenv, false)
			if err != nil {
				return err
			}
			s, err := openStore(cmd.Context(), cfg.DB, cfg.TablePrefix, false)
			if err != nil {
				return err
			}
			defer s.DB().Close()
			leases, err := s.Leases(cmd.Context())
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "LEASE\tHOLDER\tEPOCH\tEXPIRES AT\tTIME LEFT")
			var up []string // nodes by their presence rows, which fence nothing
			shown := 0
			for _, l := range leases {
				if strings.HasPrefix(l.Name, sqlstore.NodeLeasePrefix) {
					if !l.Expired() {
						up = append(up, l.Holder)
					}
					continue
				}
				shown++
				left := "expired"
				if !l.Expired() {
					left = l.Remaining().Round(time.Millisecond).String()
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", l.Name, l.Holder, l.Epoch, l.ExpiresAt.Format(time.RFC3339Nano), left)
			}
			if shown == 0 {
				fmt.Fprintln(w, "(none)\t\t\t\t")
			}
			w.Flush()
			if len(up) > 0 {
				fmt.Fprintf(env.Stdout, "\nNODES UP: %s\n", strings.Join(up, ", "))
			}
			if showHistory != "" {
				if err := printHistory(cmd.Context(), env.Stdout, s, showHistory); err != nil {
					return err
				}
			}
			st, err := s.Stats(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "\njobs: %d total, %d active, %d paused, %d due now, %d running\n",
				st.Total, st.Total-st.Paused, st.Paused, st.Due, st.Running)
			singletons, err := singletonAdmin{store: s, leases: s}.List(cmd.Context())
			if err != nil {
				return err
			}
			if len(singletons) > 0 {
				fmt.Fprintln(env.Stdout)
				w = tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "SINGLETON\tSTATUS\tHOLDER\tEPOCH\tHEARTBEAT AT\tRESTARTS")
				for _, x := range singletons {
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%d\n", x.Name, x.Status, x.Holder, x.Epoch, x.HeartbeatAt, x.Restarts)
				}
				w.Flush()
			}
			return nil
		},
	}
	addFlags(cmd.Flags(), false)
	cmd.Flags().StringVar(&showHistory, "history", "", "also show the latest leadership history of the leader lease (or of the lease named: --history=NAME), newest first")
	cmd.Flags().Lookup("history").NoOptDefVal = defaultConfig().LeaseName
	return cmd
}
