package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/mysql"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/sqlite"
	"github.com/sqlease/sqlease/sqlserver"
	"github.com/sqlease/sqlease/sqlstore"
)

// placeholderStore lets the elector's configuration rules be checked before
// any database is opened; it is never called.
type placeholderStore struct{ sqlease.LeaseStore }

// dialectOf returns the dialect name of a database URL and the driver's DSN.
func dialectOf(dbURL string) (dialect, dsn string, err error) {
	switch {
	case strings.HasPrefix(dbURL, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(dbURL, "sqlite:"), "//")
		if path == "" {
			return "", "", usagef("db: sqlite URL needs a path, e.g. sqlite:sqlease.db")
		}
		return "sqlite", path, nil
	case strings.HasPrefix(dbURL, "postgres://"), strings.HasPrefix(dbURL, "postgresql://"):
		if _, err := url.Parse(dbURL); err != nil {
			return "", "", usagef("db: invalid postgres URL (%s): %v", redact(dbURL), scrubErr(unwrapURLErr(err), dbURL))
		}
		return "postgres", dbURL, nil
	case strings.HasPrefix(dbURL, "sqlserver://"):
		return "sqlserver", dbURL, nil
	case strings.HasPrefix(dbURL, "mysql://"):
		return "mysql", dbURL, nil
	}
	return "", "", usagef("db: unsupported database URL %q: use sqlite:PATH, postgres://…, sqlserver://… or mysql://…", redact(dbURL))
}

// redact hides the database setting's secrets, for logs and messages.
func redact(dbURL string) string { return redactDSN(dbURL) }

// openStore opens the store of cfg, applying migrations when migrate is set.
func openStore(ctx context.Context, dbURL, prefix string, migrate bool) (s *sqlstore.Store, err error) {
	defer func() {
		// Drivers quote the connection string in their errors: mask its
		// secrets. A string they cannot parse is a configuration error.
		if err != nil {
			if errors.Is(err, sqlease.ErrInvalidConfig) {
				var ue usageError
				if !errors.As(err, &ue) {
					err = usageError{fmt.Errorf("db: %w", err)}
				}
			}
			err = scrubErr(err, dbURL)
		}
	}()
	dialect, dsn, err := dialectOf(dbURL)
	if err != nil {
		return nil, err
	}
	if err := sqlease.ValidateTablePrefix(prefix); err != nil {
		return nil, usagef("table_prefix: %v", err)
	}
	switch dialect {
	case "sqlite":
		db, err := sqlite.Open(dsn)
		if err != nil {
			return nil, err
		}
		s, err = sqlite.New(db, prefix)
		if err != nil {
			db.Close()
			return nil, err
		}
	case "postgres", "mysql", "sqlserver":
		open := map[string]func(string) (*sql.DB, error){"postgres": postgres.Open, "mysql": mysql.Open, "sqlserver": sqlserver.Open}[dialect]
		newStore := map[string]func(*sql.DB, string) (*sqlstore.Store, error){"postgres": postgres.New, "mysql": mysql.New, "sqlserver": sqlserver.New}[dialect]
		db, err := open(dsn)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", redact(dbURL), err)
		}
		s, err = newStore(db, prefix)
		if err != nil {
			db.Close()
			return nil, err
		}
	}
	if err := s.DB().PingContext(ctx); err != nil {
		s.DB().Close()
		if c := s.Dialect().Classify; c != nil {
			err = c(err)
		}
		return nil, fmt.Errorf("connect to %s: %w", redact(dbURL), err)
	}
	if migrate {
		if err := s.Migrate(ctx); err != nil {
			s.DB().Close()
			return nil, err
		}
	}
	return s, nil
}

// startupWait bounds how long a starting node waits for its database while
// it answers with errors worth retrying (sqlease.ErrTransient: refused or
// lost connections, a read-only server): a node started during a database
// failover (a Patroni promotion takes 10–30 s) or a restart waits for it
// instead of exiting. Any other error (a wrong password, a bad URL) ends
// the start at once.
const startupWait = 60 * time.Second

// openStoreWaiting is openStore for a starting node: it retries transient
// failures with backoff for up to wait, logging each, until ctx ends.
func openStoreWaiting(ctx context.Context, log *slog.Logger, wait time.Duration, dbURL, prefix string, migrate bool) (*sqlstore.Store, error) {
	deadline := time.Now().Add(wait)
	backoff := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		s, err := openStore(ctx, dbURL, prefix, migrate)
		if err == nil || !errors.Is(err, sqlease.ErrTransient) || time.Now().Add(backoff).After(deadline) {
			return s, err
		}
		log.Warn("database_unavailable", slog.Int("attempt", attempt), slog.String("error", err.Error()),
			slog.Duration("retry_in", backoff), slog.Duration("gives_up_in", time.Until(deadline).Round(time.Second)))
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// openExisting opens the store of an administrative command (status, jobs,
// singletons): unlike serve and migrate it creates nothing. SQLite would
// create a missing file on open, so that a command run from another
// directory left an empty sqlease.db behind and failed with "no such
// table". A missing SQLite file, or a database without sqlease's tables, is
// a usage error (exit 2) naming the database and --db. command is the
// command's name, for the message.
func openExisting(ctx context.Context, command, dbURL, prefix string) (*sqlstore.Store, error) {
	dialect, dsn, err := dialectOf(dbURL)
	if err != nil {
		return nil, err
	}
	where := redact(dbURL)
	if dialect == "sqlite" {
		// The file, without a "file:" scheme or the query (which may hold
		// _auth_pass).
		path, _, _ := strings.Cut(strings.TrimPrefix(dsn, "file:"), "?")
		if abs, err := filepath.Abs(path); err == nil && abs != path {
			where += " (" + abs + ")"
		}
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, usagef("db: no database at %s: %s reads the nodes' database and creates none; name it with --db (or SQLEASE_DB), e.g. --db sqlite:/var/lib/sqlease/sqlease.db or --db postgres://…", where, command)
		}
	}
	s, err := openStore(ctx, dbURL, prefix, false)
	if err != nil {
		return nil, err
	}
	// A cheap probe of the leases table: a database that exists but was
	// never migrated (or uses another --table-prefix).
	if _, err := s.DB().ExecContext(ctx, "SELECT 1 FROM "+prefix+"_leases WHERE 1 = 0"); err != nil {
		s.DB().Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, usagef("db: %s has no table %s_leases (%v): name the nodes' database with --db (and --table-prefix if they use another), or create the tables with sqlease migrate", where, prefix, scrubErr(err, dbURL))
	}
	return s, nil
}

// schemaOf returns the dialect for prefix, whose Migrations create the
// schema.
func schemaOf(dialect, prefix string) (sqlstore.Dialect, error) {
	if err := sqlease.ValidateTablePrefix(prefix); err != nil {
		return sqlstore.Dialect{}, usagef("table_prefix: %v", err)
	}
	var d sqlstore.Dialect
	var err error
	switch dialect {
	case "sqlite":
		d, err = sqlite.Dialect(prefix)
	case "postgres":
		d, err = postgres.Dialect(prefix)
	case "sqlserver":
		d, err = sqlserver.Dialect(prefix)
	case "mysql":
		d, err = mysql.Dialect(prefix)
	default:
		return sqlstore.Dialect{}, usagef("dialect: must be one of sqlite, postgres, sqlserver, mysql, got %q", dialect)
	}
	return d, err
}

// unwrapURLErr drops url.Error's copy of the URL.
func unwrapURLErr(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}
