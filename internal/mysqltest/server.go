package mysqltest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/testserver"
)

// Server is a private MariaDB server started by Start, for tests that must
// crash or restart their database. Its methods must be called from the
// test's goroutine (they may call t.Fatal).
type Server struct {
	mu       sync.Mutex
	mariadbd string
	dir      string // removed on cleanup
	port     int
	password string // of the user sqlease
	asUser   bool   // run as the OS user mysql (we are root)
	cmd      *exec.Cmd
	done     chan struct{}
}

// Start creates and starts a new MariaDB server on a free 127.0.0.1 port,
// with a database sqlease and a user sqlease that may create and drop the
// databases named sqlease%, and waits until it accepts connections. Unlike the server
// scripts/test.sh starts, it writes the redo log to the operating system at
// every commit (innodb_flush_log_at_trx_commit=2): a commit it acknowledged
// survives a crash of mariadbd (Restart), though not of the machine. The
// server is killed and its directory removed when the test ends, and by a
// watchdog should the test process die without cleaning up. Start fails
// the test if mariadbd is missing.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{}
	var err error
	if s.mariadbd, err = tool("mariadbd", "mysqld"); err != nil {
		t.Fatalf("mysqltest: %v (apt-get install -y mariadb-server)", err)
	}
	installDB, err := tool("mariadb-install-db", "mysql_install_db")
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	client, err := tool("mariadb", "mysql")
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	s.asUser = os.Geteuid() == 0
	uid, gid := -1, -1
	var userArgs []string
	if s.asUser {
		if uid, gid, err = testserver.OSUser("mysql"); err != nil {
			t.Fatalf("mysqltest: %v", err)
		}
		userArgs = []string{"--user=mysql"}
	}
	if s.dir, err = testserver.Dir("sqlease-mysqltest-", uid, gid); err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	t.Cleanup(func() {
		s.kill()
		os.RemoveAll(s.dir)
	})
	out, err := exec.Command(installDB, append([]string{"--no-defaults", "--datadir=" + s.datadir(),
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve", "--innodb-log-file-size=16M"}, userArgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("mysqltest: mariadb-install-db: %v\n%s", err, out)
	}
	for attempt := 1; ; attempt++ {
		if s.port, err = testserver.FreePort(); err != nil {
			t.Fatalf("mysqltest: %v", err)
		}
		if err = s.start(); err == nil {
			break
		}
		if attempt == 5 {
			t.Fatalf("mysqltest: %v", err)
		}
	}
	// mariadbd drops root for the user mysql, which clears its parent-death
	// signal: the watchdog stops it should the test process die.
	stop, err := testserver.Watchdog(s.dir, `kill -KILL "$(cat "$1/mariadb.pid")" 2>/dev/null; sleep 0.5`)
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	t.Cleanup(stop)
	var pw [12]byte
	_, _ = rand.Read(pw[:])
	s.password = hex.EncodeToString(pw[:])
	sqlText := fmt.Sprintf(`CREATE DATABASE sqlease CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
CREATE USER 'sqlease'@'127.0.0.1' IDENTIFIED BY '%s';
GRANT ALL PRIVILEGES ON `+"`sqlease%%`"+`.* TO 'sqlease'@'127.0.0.1' WITH GRANT OPTION;
GRANT CREATE USER ON *.* TO 'sqlease'@'127.0.0.1';`, s.password)
	if out, err := exec.Command(client, "--no-defaults", "--socket="+s.socket(), "-uroot", "-e", sqlText).CombinedOutput(); err != nil {
		t.Fatalf("mysqltest: creating the user sqlease: %v\n%s", err, out)
	}
	return s
}

// URL returns a mysql:// URL of the user sqlease for the (empty) database
// sqlease; give it to CreateDatabase for a database of a test's own.
func (s *Server) URL() string {
	return fmt.Sprintf("mysql://sqlease:%s@127.0.0.1:%d/sqlease", s.password, s.port)
}

// Restart kills mariadbd (SIGKILL: a crash, recovered from the redo log on
// start) and starts it again on the same port with the same data, waiting
// until it accepts connections.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.kill()
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err = s.start(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("mysqltest: restarting: %v", err)
		}
	}
}

func (s *Server) datadir() string { return filepath.Join(s.dir, "data") }
func (s *Server) socket() string  { return filepath.Join(s.dir, "mariadb.sock") }

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	args := []string{"--no-defaults", "--datadir=" + s.datadir(), "--port=" + strconv.Itoa(s.port),
		"--bind-address=127.0.0.1", "--socket=" + s.socket(), "--pid-file=" + filepath.Join(s.dir, "mariadb.pid"),
		"--log-error=" + filepath.Join(s.dir, "mariadb.log"), "--skip-log-bin", "--skip-name-resolve",
		"--default-time-zone=+00:00", "--character-set-server=utf8mb4", "--collation-server=utf8mb4_bin",
		"--max-connections=500", "--innodb-flush-log-at-trx-commit=2", "--innodb-doublewrite=0",
		"--innodb-log-file-size=16M", "--innodb-buffer-pool-size=64M"}
	if s.asUser {
		args = append(args, "--user=mysql")
	}
	cmd := exec.Command(s.mariadbd, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), time.Second); err == nil {
			c.Close()
			if _, err := os.Stat(s.socket()); err == nil {
				return nil
			}
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "mariadb.log"))
			return fmt.Errorf("mariadbd exited while starting:\n%s", tail(string(log), 2000))
		default:
		}
		if time.Now().After(deadline) {
			return errors.New("mariadbd not accepting connections after 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Server) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
	_ = os.Remove(s.socket())
}

func tool(names ...string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
		if p := "/usr/sbin/" + n; fileExists(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("none of %v found", names)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
