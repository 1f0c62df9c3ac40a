// Package pgtest starts private, throwaway PostgreSQL servers for tests.
//
// Start runs initdb and starts a server on a free 127.0.0.1 port in a fresh
// directory under /dev/shm (or /tmp if that is unusable); the test's cleanup
// stops it and removes the directory. Stop, Start and Restart on the returned Server simulate the
// database going away and coming back (same port, same data).
//
// CreateDatabase gives a test its own database on an existing server (for
// example the one named by SQLEASE_TEST_POSTGRES_URL, which scripts/test.sh
// starts), so test packages can share one server without seeing each other's
// tables.
//
// The binaries are taken from /usr/lib/postgresql/15/bin, or from the
// directory named by SQLEASE_TEST_PG_BIN. PostgreSQL refuses to run as root:
// when the test runs as root the server runs as the "postgres" OS user (via
// runuser; the user is created if missing), otherwise as the current user.
//
// The server is tuned for speed, not durability: fsync, full_page_writes and
// synchronous_commit are off. Stop is an immediate shutdown (what
// "pg_ctl stop -m immediate" does), so a transaction committed with the
// default synchronous_commit=off in the last few hundred milliseconds may be
// lost across Stop/Start, as after a real crash. A test that needs a commit
// to survive Stop must run it with "SET synchronous_commit = on".
//
// If the test process dies without running its cleanups (a go test -timeout
// panic, SIGKILL, Ctrl-C), a small watchdog shell started next to each
// server notices and shuts the server down and removes its directory.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sqlease/sqlease/internal/testserver"
)

const (
	defaultBinDir = "/usr/lib/postgresql/15/bin"
	binDirEnv     = "SQLEASE_TEST_PG_BIN"
	osUser        = "postgres"

	readyTimeout = 60 * time.Second
	stopTimeout  = 30 * time.Second
	portAttempts = 5
)

// settings are appended to postgresql.conf; the port is given on the
// command line so that a retry on another port needs no rewrite.
const settings = `
# --- pgtest ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
tcp_keepalives_idle = 5
tcp_keepalives_interval = 2
tcp_keepalives_count = 3
`

// watchdog is the shell that runs (and is the parent of) postgres.
// Arguments: $1 bin dir, $2 data dir, $3 port, $4 log file, $5 server dir.
// Its stdin is a pipe whose write end only the test process holds. A line
// on it ("stop") asks for an immediate shutdown (SIGQUIT, as pg_ctl stop -m
// immediate sends); end of file without a line means the test process died,
// so the server is shut down and its directory removed. The shell exits
// with postgres's status once postgres has exited, for whatever reason.
const watchdog = `
exec 3<&0 </dev/null 2>>"$4"
"$1/postgres" -D "$2" -p "$3" 3<&- >>"$4" 2>&1 &
pid=$!
(
	if read -r _ <&3; then
		kill -QUIT "$pid" 2>/dev/null
	else
		trap '' TERM
		kill -QUIT "$pid" 2>/dev/null
		while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
		rm -rf "$5"
	fi
) &
watcher=$!
exec 3<&-
wait "$pid"
status=$?
kill "$watcher" 2>/dev/null
exit "$status"
`

// Server is a private PostgreSQL server started by Start. Its methods must be
// called from the test's goroutine (they may call t.Fatal).
type Server struct {
	mu      sync.Mutex
	binDir  string
	dir     string // owned by the server's OS user; removed on cleanup
	dataDir string
	logPath string
	port    int
	asUser  bool // run binaries as osUser via runuser (we are root)
	proc    *process
}

// process is one running postgres with its watchdog.
type process struct {
	ctl  *os.File      // write end of the watchdog's stdin
	done chan struct{} // closed when the watchdog (hence postgres) exited
	err  error         // exit status, valid after done
}

// Start creates and starts a new PostgreSQL server and waits until it accepts
// connections. The server is stopped and its directory removed when the test
// and its subtests finish. Start fails the test if the PostgreSQL binaries
// are missing or the server does not come up.
func Start(t testing.TB) *Server {
	t.Helper()
	begin := time.Now()

	binDir := os.Getenv(binDirEnv)
	if binDir == "" {
		binDir = defaultBinDir
	}
	for _, name := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			t.Fatalf("pgtest: PostgreSQL binary %s not found in %s (install PostgreSQL 15, e.g. apt-get install postgresql-15, or set %s): %v",
				name, binDir, binDirEnv, err)
		}
	}

	s := newServer(t, binDir, "server")
	dir := s.dir
	out, err := s.command("initdb", "-D", s.dataDir, "-U", osUser, "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions").CombinedOutput()
	if err != nil {
		t.Fatalf("pgtest: initdb failed: %v\n%s", err, out)
	}
	if err := s.appendConf(settings); err != nil {
		t.Fatalf("pgtest: writing postgresql.conf: %v", err)
	}
	s.listen(t)
	t.Logf("pgtest: PostgreSQL ready on port %d in %v (dir %s)", s.port, time.Since(begin).Round(time.Millisecond), dir)
	return s
}

// newServer returns a stopped server of the binaries in binDir with a
// directory of its own (owned by the server's OS user when the test runs as
// root), stopped and removed when the test ends; what names it in errors.
func newServer(t testing.TB, binDir, what string) *Server {
	t.Helper()
	s := &Server{binDir: binDir, asUser: os.Geteuid() == 0}
	uid, gid := -1, -1
	if s.asUser {
		var err error
		if uid, gid, err = testserver.OSUser(osUser); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	dir, err := testserver.Dir("sqlease-pgtest-", uid, gid)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("pgtest: stopping %s: %v", what, err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	s.dir = dir
	s.dataDir = filepath.Join(dir, "data")
	s.logPath = filepath.Join(dir, "postgres.log")
	return s
}

// appendConf appends settings, formatted with the data directory, to the
// server's postgresql.conf.
func (s *Server) appendConf(settings string) error {
	conf, err := os.OpenFile(filepath.Join(s.dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(conf, settings, s.dataDir)
	if cerr := conf.Close(); err == nil {
		err = cerr
	}
	return err
}

// listen starts the server on a free port. Another process may take the
// port between the probe and the server's bind: then it tries another one.
func (s *Server) listen(t testing.TB) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		var err error
		if s.port, err = testserver.FreePort(); err != nil {
			t.Fatalf("pgtest: finding a free port: %v", err)
		}
		err = s.start()
		if err == nil {
			return
		}
		if !errors.Is(err, errPortInUse) || attempt == portAttempts {
			t.Fatalf("pgtest: %v", err)
		}
	}
}

// URLEnv names the shared server of the suite: scripts/test.sh starts one
// and sets it.
const URLEnv = "SQLEASE_TEST_POSTGRES_URL"

// Shared returns a function giving the URL of a server to create databases
// on (CreateDatabase): $SQLEASE_TEST_POSTGRES_URL's or, when that is unset,
// a private server started for t on the first call. It is how every suite
// that needs PostgreSQL gets it; call the function from t's goroutine or a
// subtest's.
func Shared(t testing.TB) func() string {
	var once sync.Once
	url := os.Getenv(URLEnv)
	return func() string {
		once.Do(func() {
			if url == "" {
				url = Start(t).URL()
			}
		})
		return url
	}
}

// URL returns a postgres:// URL for the server's "postgres" database as the
// superuser "postgres" (no password, sslmode=disable).
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", osUser, s.port)
}

// Stop shuts the server down immediately, like pg_ctl stop -m immediate:
// open connections are cut and uncheckpointed work is redone (crash recovery)
// on the next Start. Stopping a stopped server does nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if err := s.stop(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// Start starts a stopped server again on the same port with the same data and
// waits until it accepts connections. It fails the test if the server is
// already running.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// Restart is Stop followed by Start.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop(t)
	s.Start(t)
}

var errPortInUse = errors.New("port already in use")

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		select {
		case <-s.proc.done: // exited on its own: start it again
			s.proc = nil
		default:
			return fmt.Errorf("server on port %d is already running", s.port)
		}
	}
	logStart := fileSize(s.logPath)

	cmd := s.command("/bin/sh", "-c", watchdog, "pgtest-watchdog",
		s.binDir, s.dataDir, strconv.Itoa(s.port), s.logPath, s.dir)
	// A Ctrl-C in the terminal reaches the test process, and the watchdog
	// then shuts postgres down.
	w, err := testserver.StartLifeline(cmd)
	if err != nil {
		return fmt.Errorf("starting postgres: %v", err)
	}
	p := &process{ctl: w, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.proc = p

	if err := waitReady(s.URL(), s.dataDir, p); err != nil {
		s.stopLocked()
		s.proc = nil
		log := readFrom(s.logPath, logStart)
		if strings.Contains(log, "Address already in use") {
			return fmt.Errorf("starting postgres on port %d: %w\n%s", s.port, errPortInUse, log)
		}
		return fmt.Errorf("postgres on port %d did not become ready: %v\n--- server log (%s) ---\n%s", s.port, err, s.logPath, log)
	}
	return nil
}

// waitReady polls with real connections until one reaches the server of
// dataDir, the server exits, or readyTimeout passes.
func waitReady(url, dataDir string, p *process) error {
	deadline := time.Now().Add(readyTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("server exited during startup (%v)", p.err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		last = ping(ctx, url, dataDir)
		cancel()
		if last == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("timed out after %v: %v", readyTimeout, last)
}

// ping connects to url and checks that the server there is the one of
// dataDir: if another process took the port before our server could bind
// it, the connection reaches that process instead.
func ping(ctx context.Context, url, dataDir string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var dir string
	if err := conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dir); err != nil {
		return err
	}
	if dir != dataDir {
		return fmt.Errorf("the port is served by another server (data directory %s)", dir)
	}
	return nil
}

func (s *Server) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.stopLocked()
	s.proc = nil
	return err
}

func (s *Server) stopLocked() error {
	p := s.proc
	if p == nil {
		return nil
	}
	// The write fails harmlessly if postgres (and so the watcher) already
	// exited.
	_, _ = p.ctl.Write([]byte("stop\n"))
	p.ctl.Close()
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("postgres on port %d did not stop within %v (data dir %s)", s.port, stopTimeout, s.dataDir)
	}
}

// command runs a PostgreSQL binary (or a path) as the server's OS user.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	if !filepath.IsAbs(name) {
		name = filepath.Join(s.binDir, name)
	}
	if s.asUser {
		return exec.Command("runuser", append([]string{"-u", osUser, "--", name}, args...)...)
	}
	return exec.Command(name, args...)
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readFrom returns the file's contents from offset on, at most its last 16 KiB.
func readFrom(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	if offset > int64(len(b)) {
		offset = 0
	}
	b = b[offset:]
	if len(b) > 16<<10 {
		b = b[len(b)-16<<10:]
	}
	return string(b)
}

// CreateDatabase creates a new, uniquely named database on the server at url
// (a postgres:// URL or a keyword/value connection string of a role allowed
// to create databases) and returns a connection string for it, of the same
// form. The database is dropped, with FORCE, when the test finishes.
func CreateDatabase(t testing.TB, url string) string {
	t.Helper()
	name := testserver.DatabaseName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: connecting to create a database: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			// Most likely the test stopped the server for good.
			t.Logf("pgtest: not dropping database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: dropping database %s: %v", name, err)
		}
	})
	u, err := withDatabase(url, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return u
}

// withDatabase returns conn with its database replaced by name.
func withDatabase(conn, name string) (string, error) {
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		u, err := url.Parse(conn)
		if err != nil {
			return "", fmt.Errorf("parsing URL: %v", err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	// Keyword/value form: a later dbname overrides an earlier one.
	return strings.TrimSpace(conn) + " dbname=" + name, nil
}
