package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/action"
	"github.com/sqlease/sqlease/scheduler"
)

func schemaCmd(env Env) *cobra.Command {
	var dialect, prefix string
	var seed bool
	cmd := &cobra.Command{
		Use:   "schema --dialect sqlite|postgres|sqlserver|mysql",
		Short: "Print the SQL that creates sqlease's tables (and, with --seed, an example job)",
		Long: `Print the SQL script that 'sqlease migrate' applies, for DBAs who apply schema
changes themselves. With --seed, print instead a script that inserts an example
job ("example-heartbeat", every minute, running 'true'), idempotently.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dialect == "" {
				return usagef("dialect: --dialect is required (sqlite, postgres, sqlserver or mysql)")
			}
			d, err := schemaOf(dialect, prefix)
			if err != nil {
				return err
			}
			stmts := d.Migrations()
			if seed {
				stmt, err := seedScript(dialect, prefix)
				if err != nil {
					return err
				}
				stmts = []string{stmt}
			}
			fmt.Fprintf(env.Stdout, "-- sqlease %s schema, table prefix %q\n\n", dialect, prefix)
			for _, s := range stmts {
				fmt.Fprintf(env.Stdout, "%s;\n\n", s)
			}
			if !seed && len(d.Columns()) > 0 {
				// The script creates tables as they are now; a schema
				// from an earlier version lacks these columns, which
				// 'sqlease migrate' adds when missing.
				fmt.Fprintf(env.Stdout, "-- Upgrading tables created by an earlier version: add each column below that they lack.\n")
				for _, c := range d.Columns() {
					fmt.Fprintf(env.Stdout, "-- %s;\n", strings.ReplaceAll(c.Add, "\n", "\n-- "))
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dialect, "dialect", "", "sqlite, postgres, sqlserver or mysql")
	cmd.Flags().StringVar(&prefix, "table-prefix", "sqlease", "prefix of the table names")
	cmd.Flags().BoolVar(&seed, "seed", false, "print a script that inserts an example job instead")
	return cmd
}

// seedScript is an INSERT of an example job, with the same content hash the
// API would compute, so creating it again through the API is idempotent.
func seedScript(dialect, prefix string) (string, error) {
	j, hash, err := scheduler.Prepare(sqlease.Job{
		Name:     "example-heartbeat",
		Schedule: sqlease.Schedule{Every: time.Minute},
		Action:   json.RawMessage(`{"exec":{"command":["true"],"timeout":"10s"}}`),
	}, action.ValidateJSON)
	if err != nil {
		return "", err
	}
	sched, _ := json.Marshal(j.Schedule)
	now := map[string]string{
		"sqlite":    "strftime('%Y-%m-%d %H:%M:%f','now')",
		"postgres":  "clock_timestamp()",
		"mysql":     "UTC_TIMESTAMP(6)",
		"sqlserver": "SYSUTCDATETIME()",
	}[dialect]
	paused := map[string]string{"postgres": "false"}[dialect]
	if paused == "" {
		paused = "0"
	}
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	cols := fmt.Sprintf(`%s_jobs (name, spec_hash, schedule, action, missed_runs, skip_if_older_than_ms,
	max_attempts, backoff_ms, lock_timeout_ms, paused, next_run_at, created_at, last_modified_at)`, prefix)
	values := fmt.Sprintf(`%s, %s, %s, %s, %s, %d, %d, %d, %d, %s, %s, %s, %s`, q(j.Name), q(hash), q(string(sched)), q(string(j.Action)), q(string(j.MissedRuns)),
		j.SkipIfOlderThan.Milliseconds(), j.Retry.MaxAttempts, j.Retry.Backoff.Milliseconds(), j.LockTimeout.Milliseconds(),
		paused, now, now, now)
	// Idempotent in each dialect's words: a second run inserts nothing.
	switch dialect {
	case "mysql":
		return fmt.Sprintf("INSERT INTO %s\nVALUES (%s)\nON DUPLICATE KEY UPDATE id = id", cols, values), nil
	case "sqlserver":
		return fmt.Sprintf("INSERT INTO %s\nSELECT %s\nWHERE NOT EXISTS (SELECT 1 FROM %s_jobs WHERE name = %s)", cols, values, prefix, q(j.Name)), nil
	}
	return fmt.Sprintf("INSERT INTO %s\nVALUES (%s)\nON CONFLICT DO NOTHING", cols, values), nil
}
