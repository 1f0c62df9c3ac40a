package cli

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/sqlease/sqlease/action"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/scheduler"
)

// Config is the configuration of a node. Every field is a setting with a
// flag (--lease-duration), an environment twin (SQLEASE_LEASE_DURATION) and a
// config-file key (lease_duration); precedence: flag > environment > file >
// default.
type Config struct {
	DB              string
	HTTP            string
	HolderID        string
	LeaseName       string
	TablePrefix     string
	LeaseDuration   time.Duration
	RenewInterval   time.Duration
	AcquireInterval time.Duration
	Dispatch        string
	Election        string
	APIToken        string
	LogFormat       string
	LogLevel        string
	Migrate         bool
	PollInterval    time.Duration
	RefreshInterval time.Duration
	ShutdownTimeout time.Duration
	RunRetention    time.Duration
	RunOutputLimit  int // bytes; 0 keeps none
	MaxConcurrent   int
	APITokenFile    string
	AllowedHosts    string // comma-separated
	AllowExec       string // "", "true" or "false"; "" means: only when HTTP listens on loopback
	ExecUser        string
	// SecureCookies marks the dashboard's session cookie Secure always;
	// TrustForwardedProto when a proxy says X-Forwarded-Proto: https.
	SecureCookies       bool
	TrustForwardedProto bool
	// HTTPActionAllow lists, comma-separated, the networks (CIDR), addresses
	// and host names HTTP actions may reach although the destination policy
	// refuses them (loopback and link-local, beyond loopback).
	HTTPActionAllow string
	// AdvertiseURL is the base URL at which actions and singleton
	// processes reach this node's API (SQLEASE_API, Sqlease-Api): needed
	// when they run on other hosts and --http listens on every address.
	AdvertiseURL string
	// RequireSyncReplication refuses to lead and to accept writes while
	// the database does not replicate commits synchronously.
	RequireSyncReplication bool
}

// DefaultDB is the embedded SQLite file a node uses when no --db is given.
const DefaultDB = "sqlite:sqlease.db"

func defaultConfig() Config {
	return Config{
		DB:              DefaultDB,
		HTTP:            "127.0.0.1:8080",
		LeaseName:       election.DefaultLeaseName,
		TablePrefix:     "sqlease",
		LeaseDuration:   election.DefaultLeaseDuration,
		RenewInterval:   election.DefaultRenewInterval,
		AcquireInterval: election.DefaultAcquireInterval,
		Dispatch:        "leader",
		Election:        "lease",
		LogFormat:       "text",
		LogLevel:        "info",
		Migrate:         true,
		PollInterval:    scheduler.DefaultPollInterval,
		RefreshInterval: scheduler.DefaultRefreshInterval,
		ShutdownTimeout: scheduler.DefaultShutdownTimeout,
		RunRetention:    scheduler.DefaultRunRetention,
		RunOutputLimit:  scheduler.DefaultOutputLimit,
	}
}

// setting is one configuration field.
type setting struct {
	name   string // flag name; the env and file names derive from it
	usage  string
	get    func(*Config) string
	set    func(*Config, string) error
	secret bool // never printed
	serve  bool // only for serve (others take --db only)
}

func (s setting) env() string {
	return "SQLEASE_" + strings.ToUpper(strings.ReplaceAll(s.name, "-", "_"))
}
func (s setting) file() string { return strings.ReplaceAll(s.name, "-", "_") }

func str(name, usage string, f func(*Config) *string, secret, serve bool) setting {
	return setting{name: name, usage: usage, secret: secret, serve: serve,
		get: func(c *Config) string { return *f(c) },
		set: func(c *Config, v string) error { *f(c) = v; return nil }}
}

func oneOf(name, usage string, f func(*Config) *string, allowed ...string) setting {
	s := str(name, usage+" ("+strings.Join(allowed, "|")+")", f, false, true)
	s.set = func(c *Config, v string) error {
		for _, a := range allowed {
			if v == a {
				*f(c) = v
				return nil
			}
		}
		return fmt.Errorf("must be one of %s, got %q", strings.Join(allowed, ", "), v)
	}
	return s
}

// maxConcurrentLimit bounds --max-concurrent: each run is a goroutine and
// often a connection; a billion of them is an out-of-memory crash.
const maxConcurrentLimit = 10_000

// maxDuration bounds every duration setting (run retention apart).
const maxDuration = 24 * time.Hour

// minInterval is the shortest interval of a loop the node runs over and
// over (renew, acquire, poll, refresh): below it a node spins a core and
// floods its database (1ns was accepted).
const minInterval = 10 * time.Millisecond

// maxConfigBytes bounds the config file: a flat mapping of a few dozen
// settings. A device named by mistake (/dev/zero) must not be read forever.
const maxConfigBytes = 1 << 20

func boolean(name, usage string, f func(*Config) *bool) setting {
	return setting{name: name, usage: usage + " (true|false)", serve: true,
		get: func(c *Config) string { return fmt.Sprint(*f(c)) },
		set: func(c *Config, v string) error {
			switch strings.ToLower(v) {
			case "true", "1", "yes":
				*f(c) = true
			case "false", "0", "no":
				*f(c) = false
			default:
				return fmt.Errorf("must be true or false, got %q", v)
			}
			return nil
		}}
}

func dur(name, usage string, f func(*Config) *time.Duration) setting {
	return setting{name: name, usage: usage, serve: true,
		get: func(c *Config) string { return f(c).String() },
		set: func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("must be a duration like 500ms, 20s or 1m, got %q", v)
			}
			if d == 0 {
				// Zero would silently mean the default (or nothing): say so.
				return fmt.Errorf("must be positive, got %q (zero would mean the default: leave it unset for that)", v)
			}
			*f(c) = d
			return nil
		}}
}

// settings lists every configuration field, in --help order.
var settings = []setting{
	str("db", "database URL: sqlite:PATH, postgres://…", func(c *Config) *string { return &c.DB }, true, false),
	str("table-prefix", "prefix of sqlease's table names", func(c *Config) *string { return &c.TablePrefix }, false, false),
	str("http", "HTTP listen address", func(c *Config) *string { return &c.HTTP }, false, true),
	str("holder-id", "this node's holder id (default hostname-pid-random)", func(c *Config) *string { return &c.HolderID }, false, true),
	str("lease-name", "name of the leader lease", func(c *Config) *string { return &c.LeaseName }, false, true),
	dur("lease-duration", "how long an acquire or renew holds the lease", func(c *Config) *time.Duration { return &c.LeaseDuration }),
	dur("renew-interval", "how often the leader renews (shorter than lease-duration)", func(c *Config) *time.Duration { return &c.RenewInterval }),
	dur("acquire-interval", "how often followers poll the lease", func(c *Config) *time.Duration { return &c.AcquireInterval }),
	oneOf("dispatch", "who runs jobs: the leader only, or every node claiming due jobs", func(c *Config) *string { return &c.Dispatch }, "leader", "claim"),
	oneOf("election", "leader election mechanism", func(c *Config) *string { return &c.Election }, "lease", "advisory"),
	str("api-token", "bearer token the API requires (prefer --api-token-file: a command line is visible to every user)", func(c *Config) *string { return &c.APIToken }, true, true),
	str("api-token-file", "file holding the API token (surrounding whitespace ignored)", func(c *Config) *string { return &c.APITokenFile }, false, true),
	str("allowed-hosts", "comma-separated host names the API is reached by besides loopback (e.g. behind a proxy); * for any", func(c *Config) *string { return &c.AllowedHosts }, false, true),
	str("exec-user", "run exec actions and singleton processes as this OS user (the daemon must run as root)", func(c *Config) *string { return &c.ExecUser }, false, true),
	oneOf("allow-exec", "allow exec actions and singletons (default: only when --http listens on loopback)", func(c *Config) *string { return &c.AllowExec }, "true", "false"),
	{name: "advertise-url", usage: "base URL at which actions and singleton processes call this node's API (SQLEASE_API, Sqlease-Api; default http:// and the --http address, 127.0.0.1 when it listens on every address)", serve: true,
		get: func(c *Config) string { return c.AdvertiseURL },
		set: func(c *Config, v string) error {
			u, err := advertiseURL(v)
			if err != nil {
				return err
			}
			c.AdvertiseURL = u
			return nil
		}},
	str("http-action-allow", "comma-separated networks (CIDR), addresses or host names HTTP actions may reach although they are loopback or link-local (refused by default when --http listens beyond loopback)", func(c *Config) *string { return &c.HTTPActionAllow }, false, true),
	oneOf("log-format", "log format", func(c *Config) *string { return &c.LogFormat }, "text", "json"),
	oneOf("log-level", "log level", func(c *Config) *string { return &c.LogLevel }, "debug", "info", "warn", "error"),
	boolean("migrate", "apply schema migrations at start", func(c *Config) *bool { return &c.Migrate }),
	boolean("secure-cookies", "mark the dashboard's session cookie Secure (the node is reached over HTTPS through a proxy)", func(c *Config) *bool { return &c.SecureCookies }),
	boolean("require-synchronous-replication", "refuse to lead and to accept writes (503) while the database does not replicate commits synchronously to a standby", func(c *Config) *bool { return &c.RequireSyncReplication }),
	boolean("trust-forwarded-proto", "mark the session cookie Secure when a proxy sends X-Forwarded-Proto: https", func(c *Config) *bool { return &c.TrustForwardedProto }),
	dur("poll-interval", "claim dispatch: how often each node looks for due jobs", func(c *Config) *time.Duration { return &c.PollInterval }),
	dur("schedule-refresh-interval", "leader dispatch: how often the leader refreshes its schedule", func(c *Config) *time.Duration { return &c.RefreshInterval }),
	dur("shutdown-timeout", "how long in-flight runs may finish on shutdown", func(c *Config) *time.Duration { return &c.ShutdownTimeout }),
	dur("run-retention", "how long finished runs are kept (negative: forever)", func(c *Config) *time.Duration { return &c.RunRetention }),
	{name: "run-output-limit", usage: fmt.Sprintf("bytes of each run's output kept with it, the tail (0: none; at most %d)", scheduler.MaxOutputLimit), serve: true,
		get: func(c *Config) string { return strconv.Itoa(c.RunOutputLimit) },
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > scheduler.MaxOutputLimit {
				return fmt.Errorf("must be a whole number of bytes in [0, %d], got %q", scheduler.MaxOutputLimit, v)
			}
			c.RunOutputLimit = n
			return nil
		}},
	{name: "max-concurrent", usage: "runs executing at once on this node (0: 512 on postgres, sqlite and mysql, else 64)", serve: true,
		get: func(c *Config) string { return strconv.Itoa(c.MaxConcurrent) },
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > maxConcurrentLimit {
				return fmt.Errorf("must be a whole number in [0, %d], got %q", maxConcurrentLimit, v)
			}
			c.MaxConcurrent = n
			return nil
		}},
}

// usageError is a configuration or command-line error: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// addFlags registers the settings as string flags on fs; values are parsed by
// load so that flags, environment and file share one parser and one message.
func addFlags(fs *pflag.FlagSet, serve bool) {
	def := defaultConfig()
	for _, s := range settings {
		if s.serve && !serve {
			continue
		}
		usage := s.usage + " [" + s.env() + "]"
		if d := s.get(&def); d != "" && !s.secret {
			usage += " (default " + d + ")"
		} else if s.name == "db" {
			usage += " (default " + DefaultDB + ")"
		}
		fs.String(s.name, "", usage)
	}
	if serve {
		fs.String("config", "", "YAML config file; keys are the flag names with _ for - [SQLEASE_CONFIG]")
	}
}

// load builds the configuration: defaults, then the config file, then the
// environment, then the flags that were set.
func load(fs *pflag.FlagSet, getenv func(string) string, serve bool) (Config, error) {
	c := defaultConfig()
	byName := map[string]setting{}
	for _, s := range settings {
		if !s.serve || serve {
			byName[s.name] = s
		}
	}
	apply := func(s setting, v, source string) error {
		if err := s.set(&c, v); err != nil {
			return usagef("%s (%s): %v", s.file(), source, err)
		}
		return nil
	}

	path := getenv("SQLEASE_CONFIG")
	if f := fs.Lookup("config"); f != nil && f.Changed {
		path = f.Value.String()
	}
	if serve && path != "" {
		values, err := readConfigFile(path)
		if err != nil {
			return Config{}, err
		}
		keys := make([]string, 0, len(values))
		for k := range values {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			s, ok := byName[strings.ReplaceAll(k, "_", "-")]
			if !ok || strings.Contains(k, "-") {
				return Config{}, usagef("%s: unknown key %q in config file %s", k, k, path)
			}
			if err := apply(s, values[k], "config file "+path); err != nil {
				return Config{}, err
			}
		}
	}
	for _, s := range settings { // in a fixed order: the first bad one is reported
		if _, ok := byName[s.name]; !ok {
			continue
		}
		if v, ok := lookupEnv(getenv, s.env()); ok {
			if err := apply(s, v, "environment "+s.env()); err != nil {
				return Config{}, err
			}
		}
	}
	var err error
	fs.Visit(func(f *pflag.Flag) {
		if s, ok := byName[f.Name]; ok && err == nil {
			err = apply(s, f.Value.String(), "flag --"+f.Name)
		}
	})
	return c, err
}

func lookupEnv(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

// readConfigFile reads a flat YAML mapping of setting names to scalars.
func readConfigFile(path string) (map[string]string, error) {
	// A regular file, read up to a bound (as the token file): a device or
	// a FIFO must neither hang the node nor fill its memory.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, usagef("config: cannot read %s: %v", path, errors.Unwrap(err))
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxConfigBytes {
		return nil, usagef("config: %s must be a regular file of at most %d bytes", path, maxConfigBytes)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, usagef("config: cannot read %s: %v", path, errors.Unwrap(err))
	}
	b, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	f.Close()
	if err != nil || len(b) > maxConfigBytes {
		return nil, usagef("config: %s must be a regular file of at most %d bytes", path, maxConfigBytes)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return nil, usagef("config: %s is not valid YAML: %v", path, err)
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		switch v := v.(type) {
		case string:
			out[k] = v
		case bool, int, float64:
			out[k] = fmt.Sprint(v)
		default:
			return nil, usagef("%s: config file %s: value must be a string, number or boolean", k, path)
		}
	}
	return out, nil
}

// validate checks the rules that span fields, with the messages of the
// packages that own them.
func (c Config) validate() error {
	if c.Election == "advisory" {
		if d, _, err := dialectOf(c.DB); err == nil && d == "sqlite" {
			return usagef("election: advisory mode needs a database with session locks (postgres, mysql or sqlserver), not %s", d)
		}
	}
	ec := election.Config{LeaseName: c.LeaseName, HolderID: c.HolderID, LeaseDuration: c.LeaseDuration,
		RenewInterval: c.RenewInterval, AcquireInterval: c.AcquireInterval, Store: placeholderStore{}}
	if err := ec.Validate(); err != nil {
		return usageError{firstLine(err)}
	}
	for name, d := range map[string]time.Duration{"poll_interval": c.PollInterval, "schedule_refresh_interval": c.RefreshInterval, "shutdown_timeout": c.ShutdownTimeout} {
		if d <= 0 {
			return usagef("%s must be positive, got %s", name, d)
		}
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"renew_interval", c.RenewInterval}, {"acquire_interval", c.AcquireInterval}, {"poll_interval", c.PollInterval},
		{"schedule_refresh_interval", c.RefreshInterval}} {
		if f.d > 0 && f.d < minInterval {
			return usagef("%s must be at least %s, got %s (shorter spins a core and floods the database)", f.name, minInterval, f.d)
		}
	}
	for name, d := range map[string]time.Duration{"lease_duration": c.LeaseDuration, "renew_interval": c.RenewInterval,
		"acquire_interval": c.AcquireInterval, "poll_interval": c.PollInterval, "schedule_refresh_interval": c.RefreshInterval,
		"shutdown_timeout": c.ShutdownTimeout} {
		if d > maxDuration {
			return usagef("%s must be at most %s, got %s", name, maxDuration, d)
		}
	}
	if c.APIToken != "" && c.APITokenFile != "" {
		return usagef("api_token: set --api-token or --api-token-file, not both")
	}
	return nil
}

// minTokenBytes is the shortest API token accepted: 16 bytes of a random
// source is beyond guessing; shorter ones are more often a placeholder.
const minTokenBytes = 16

// maxTokenFileBytes bounds the token file.
const maxTokenFileBytes = 4096

// resolveToken reads the token file when one is set and checks the token:
// surrounding whitespace (a secret file's newline) is dropped — trimmed
// reports it — and a token left empty or shorter than minTokenBytes is a
// configuration error.
func (c *Config) resolveToken() (trimmed bool, err error) {
	if c.APITokenFile != "" {
		// A regular file, read up to a bound: a device or a FIFO named by
		// mistake (/dev/zero, /dev/stdin) must not hang or fill memory.
		fi, err := os.Stat(c.APITokenFile)
		if err != nil {
			return false, usagef("api_token_file: cannot read %s: %v", c.APITokenFile, errors.Unwrap(err))
		}
		if !fi.Mode().IsRegular() || fi.Size() > maxTokenFileBytes {
			return false, usagef("api_token_file: %s must be a regular file of at most %d bytes", c.APITokenFile, maxTokenFileBytes)
		}
		f, err := os.Open(c.APITokenFile)
		if err != nil {
			return false, usagef("api_token_file: cannot read %s: %v", c.APITokenFile, errors.Unwrap(err))
		}
		b, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1)) // /proc files say size 0
		f.Close()
		if err != nil || len(b) > maxTokenFileBytes {
			return false, usagef("api_token_file: %s must be a regular file of at most %d bytes", c.APITokenFile, maxTokenFileBytes)
		}
		c.APIToken = string(b)
		if strings.TrimSpace(c.APIToken) == "" {
			return false, usagef("api_token_file: %s is empty", c.APITokenFile)
		}
	}
	if c.APIToken == "" {
		return false, nil
	}
	t := strings.TrimSpace(c.APIToken)
	if len(t) < minTokenBytes {
		return false, usagef("api_token: must be at least %d characters (not counting surrounding whitespace), got %d", minTokenBytes, len(t))
	}
	trimmed, c.APIToken = t != c.APIToken, t
	return trimmed, nil
}

// execPolicy is the node's one decision on commands (action.ExecPolicy),
// from --allow-exec, the listen address and the API token.
func (c Config) execPolicy() action.ExecPolicy {
	return action.NewExecPolicy(c.AllowExec, isLoopback(c.HTTP), c.APIToken != "")
}

// allowedHosts splits --allowed-hosts.
// allowedHosts are the host names the API accepts besides loopback: the
// configured ones and the advertised URL's, which actions call it by.
func (c Config) allowedHosts() []string {
	hosts := splitList(c.AllowedHosts)
	if u, err := url.Parse(c.AdvertiseURL); err == nil && c.AdvertiseURL != "" {
		hosts = append(hosts, u.Hostname())
	}
	return hosts
}

// advertiseURL checks a --advertise-url: an absolute http or https URL
// naming a host, with no credentials, path, query or fragment (actions
// append /v1/… to it); a trailing slash is dropped.
func advertiseURL(v string) (string, error) {
	u, err := url.Parse(v)
	switch {
	case err != nil:
		return "", fmt.Errorf("must be a URL such as http://10.0.0.5:8080, got %q", v)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("must be an http:// or https:// URL, got %q", v)
	case u.Hostname() == "":
		return "", fmt.Errorf("must name a host, got %q", v)
	case u.User != nil:
		return "", fmt.Errorf("must not hold credentials (actions get their own run token), got a URL with user information")
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || strings.Trim(u.Path, "/") != "":
		return "", fmt.Errorf("must be a base URL without a path, query or fragment, got %q", v)
	}
	return u.Scheme + "://" + u.Host, nil
}

// apiBase is the base URL actions and singleton processes are given for
// this node's API, listening on addr.
func (c Config) apiBase(addr net.Addr) string {
	if c.AdvertiseURL != "" {
		return strings.TrimSuffix(c.AdvertiseURL, "/")
	}
	return "http://" + localAddr(addr)
}

// splitList splits a comma-separated setting, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, h := range strings.Split(s, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}

// firstLine keeps one error of a joined list: the CLI reports one line.
func firstLine(err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok && len(j.Unwrap()) > 0 {
		return j.Unwrap()[0]
	}
	return err
}
