package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
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
	t := newTable(out, "AT", "EVENT", "HOLDER", "EPOCH", "REASON")
	for _, e := range events {
		t.row(e.At.Format(time.RFC3339Nano), e.Event, e.Holder, fmt.Sprint(e.Epoch), e.Reason)
	}
	if len(events) == 0 {
		t.row("(none)", "", "", "", "")
	}
	return t.flush()
}

func statusCmd(env Env) *cobra.Command {
	var showHistory string
	var text bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the leases (holder, epoch, time left), a summary of the jobs and the singletons, as aligned tables; --history adds the leadership history",
		Long: `Show, as aligned tables read straight from the database, the leases (holder,
epoch, expiry, time left), the nodes up, a summary of the jobs and the
singletons; --history adds the latest leadership history. The database must
exist: status never creates one (see --db).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := existingStore(env, cmd)
			if err != nil {
				return err
			}
			defer s.DB().Close()
			leases, err := s.Leases(cmd.Context())
			if err != nil {
				return err
			}
			w := newTable(env.Stdout, "LEASE", "HOLDER", "EPOCH", "EXPIRES AT", "TIME LEFT")
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
				w.row(l.Name, l.Holder, fmt.Sprint(l.Epoch), l.ExpiresAt.Format(time.RFC3339Nano), left)
			}
			if shown == 0 {
				w.row("(none)", "", "", "", "")
			}
			if err := w.flush(); err != nil {
				return err
			}
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
				w = newTable(env.Stdout, "SINGLETON", "STATUS", "HOLDER", "EPOCH", "HEARTBEAT AT", "RESTARTS")
				for _, x := range singletons {
					w.row(x.Name, x.Status, x.Holder, fmt.Sprint(x.Epoch), x.HeartbeatAt, fmt.Sprint(x.Restarts))
				}
				if err := w.flush(); err != nil {
					return err
				}
			}
			return nil
		},
	}
	addFlags(cmd.Flags(), false)
	cmd.Flags().StringVar(&showHistory, "history", "", "also show the latest leadership history of the leader lease (or of the lease named: --history=NAME), newest first")
	cmd.Flags().Lookup("history").NoOptDefVal = defaultConfig().LeaseName
	cmd.Flags().BoolVar(&text, "text", true, "print tables (status has only this form; the flag is accepted as on the other lists)")
	return cmd
}
