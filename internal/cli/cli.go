// Package cli is the sqlease command line: serve, migrate, schema, status,
// jobs and version. cmd/sqlease only calls Main.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sqlease/sqlease/mysql"
)

// Version is set at build time with -ldflags "-X …/internal/cli.Version=v1.2.3".
var Version = ""

// Env is how the command line reaches its environment; tests substitute it.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

// Main runs the command line and returns the exit status: 0 on success, 2 on
// a usage or configuration error (one line on stderr naming the field and
// the rule), 1 on any other failure.
func Main(ctx context.Context, args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	root := newRoot(env)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	msg := strings.TrimPrefix(err.Error(), "sqlease: ")
	var ue usageError
	if errors.As(err, &ue) {
		// One line, as API.md promises: some errors (YAML's) span several.
		fmt.Fprintln(env.Stderr, "sqlease: "+lineBreaks.ReplaceAllString(strings.TrimSpace(msg), "; "))
		return 2
	}
	fmt.Fprintln(env.Stderr, "sqlease: "+msg)
	return 1
}

// lineBreaks and the indentation around them, in a multi-line error.
var lineBreaks = regexp.MustCompile(`[ \t]*\r?\n\s*`)

func newRoot(env Env) *cobra.Command {
	root := &cobra.Command{
		Use:   "sqlease",
		Short: "Exactly one actor for a fleet, on the SQL database it already runs",
		Long: `sqlease elects one leader among the nodes sharing a database and runs each
scheduled occurrence of each job exactly once, fenced by the lease epoch.

sqlease serve runs a node. Every other command talks to the database directly,
not to a node's HTTP API: give it the nodes' database with --db (or
SQLEASE_DB; default sqlite:sqlease.db in the working directory). Only serve and
migrate create a database or its tables; status, jobs and singletons refuse a
database that does not exist (exit 2) rather than create an empty one.`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(serveCmd(env), migrateCmd(env), schemaCmd(env), statusCmd(env), jobsCmd(env), singletonsCmd(env), versionCmd(env))
	// Unknown subcommands are usage errors too.
	root.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("unknown command %q; see sqlease --help", args[0])
		}
		return nil
	}
	root.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
	return root
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q", cmd.CommandPath(), args[0])
	}
	return nil
}

func oneArg(name string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usagef("%s takes exactly one argument: %s", cmd.CommandPath(), name)
		}
		return nil
	}
}

func serveCmd(env Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a node: HTTP API, leader election and job execution",
		Long: `Run a node. With no flags it uses an embedded SQLite file sqlease.db in the
working directory and serves HTTP on 127.0.0.1:8080.

Every flag has an environment twin SQLEASE_<FLAG> (dashes become underscores)
and a config-file key; precedence: flag > environment > config file > default.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := load(cmd.Flags(), env.Getenv, true)
			if err != nil {
				return err
			}
			if path := env.Getenv(cpuProfileEnv); path != "" {
				stop, err := startCPUProfile(path)
				if err != nil {
					return err
				}
				defer stop()
			}
			n, err := NewNode(cmd.Context(), cfg, env.Stderr)
			if err != nil {
				return err
			}
			// The MySQL driver's own messages ("closing bad idle
			// connection") as records of the node's log, not bare lines.
			mysql.SetDriverLogger(n.log)
			return n.Run(cmd.Context())
		},
	}
	addFlags(cmd.Flags(), true)
	return cmd
}

func migrateCmd(env Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade sqlease's tables",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := load(cmd.Flags(), env.Getenv, false)
			if err != nil {
				return err
			}
			s, err := openStore(cmd.Context(), cfg.DB, cfg.TablePrefix, true)
			if err != nil {
				return err
			}
			defer s.DB().Close()
			fmt.Fprintf(env.Stdout, "migrated %s (%s)\n", redact(cfg.DB), s.Dialect().Name)
			return nil
		},
	}
	addFlags(cmd.Flags(), false)
	return cmd
}

func versionCmd(env Env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the commit it was built from and the Go version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, ok := debug.ReadBuildInfo()
			if !ok {
				info = nil
			}
			fmt.Fprintln(env.Stdout, "sqlease", versionOf(Version, info))
			return nil
		},
	}
}

// versionOf is what sqlease version prints after the name: the version, then
// in parentheses the commit, whether the tree had local changes, and the Go
// toolchain. The version is ldflags' (Version) if set, else the module's
// (go install …@v1.2.3; go build in a checkout stamps a pseudo-version),
// else "devel"; the commit comes from the VCS stamp go build adds in a
// checkout (-buildvcs). Without either it says how to get them rather than
// printing a bare "(devel)".
func versionOf(ldflags string, info *debug.BuildInfo) string {
	v := ldflags
	goVersion := runtime.Version()
	var rev, at string
	modified := false
	if info != nil {
		if v == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		if info.GoVersion != "" {
			goVersion = info.GoVersion
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	var details []string
	if rev != "" {
		c := "commit " + rev
		if at != "" {
			c += " of " + at
		}
		if modified {
			c += ", with local changes"
		}
		details = append(details, c)
	} else if v == "devel" {
		details = append(details, "no version or commit stamped: build in a git checkout, go install …@VERSION, or set -ldflags -X github.com/sqlease/sqlease/internal/cli.Version=…")
	}
	details = append(details, goVersion+" "+runtime.GOOS+"/"+runtime.GOARCH)
	return v + " (" + strings.Join(details, "; ") + ")"
}

// shortVersion is the version a node shows its fleet (the dashboard): the
// version and, when stamped, the commit's first 12 digits, "+dirty" with
// local changes.
func shortVersion() string {
	info, _ := debug.ReadBuildInfo()
	v := strings.Fields(versionOf(Version, info))[0]
	if info == nil {
		return v
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 && !strings.Contains(v, s.Value[:12]) {
			v += "-" + s.Value[:12]
		}
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.modified" && s.Value == "true" {
			v += "+dirty"
		}
	}
	return v
}

// dbFlags is the flag set of the commands that only need a database.
var _ = pflag.ContinueOnError
