// Package hacluster runs a throwaway highly available PostgreSQL for tests:
// one etcd member and a Patroni 3 cluster of PostgreSQL 15 members, all on
// 127.0.0.1 with ports of their own, in a fresh directory under /dev/shm.
//
// Each member's PostgreSQL serves clients on its own port (Member.Port; the
// multi-host DSN lists them all with target_session_attrs=read-write) and
// replication through an in-process TCP proxy in front of that port: the
// member's Patroni connect_address, from which the other members'
// primary_conninfo is built. CutReplication takes that proxy down (the
// primary's walsenders end, standbys cannot reconnect) without touching
// clients; RestoreReplication brings it back.
//
// Faults: Kill is the death of a member's host — SIGKILL of its Patroni, its
// postmaster (read from postmaster.pid) and every backend, at once. Restart
// starts a killed member's Patroni again on the same data (it rejoins as a
// replica, after pg_rewind or a fresh base backup when its timeline
// diverged). SetSynchronous switches Patroni's synchronous_mode at run time
// (PATCH /config).
//
// Timings are tuned for tests: ttl 10 s, loop_wait 1 s, retry_timeout 4 s,
// maximum_lag_on_failover at Patroni's default (1 MiB); fsync is off. A
// kill of the primary is followed by a promotion after the leader key
// expires, about ttl later.
//
// Start-up (etcd, the first member's initdb and bootstrap, then each
// replica's base backup) takes about 10–20 s on this project's loaded
// two-core machines: start one cluster per test and reuse it across
// subtests.
//
// PostgreSQL refuses to run as root: when the test runs as root, Patroni
// (and so PostgreSQL) runs as the OS user postgres, which must exist (the
// PostgreSQL package and pgtest create it). The test's cleanup stops
// everything and removes the directory; should the test process die
// without cleanups (a -timeout panic, SIGKILL), a watchdog shell notices and
// does the same.
package hacluster

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/fleettest"
	"github.com/sqlease/sqlease/internal/testserver"
	"github.com/sqlease/sqlease/postgres"
)

// Defaults of Config.
const (
	DefaultMembers = 2
	DefaultBinDir  = "/usr/lib/postgresql/15/bin"
	// DefaultTTL is Patroni's ttl (seconds): how long the leader key lives
	// without a renewal, hence about how long after the primary's death a
	// replica is promoted.
	DefaultTTL = 10
)

// Config says what cluster Start makes. The zero value is a two-member
// asynchronous cluster.
type Config struct {
	// Members is the number of PostgreSQL members (default 2).
	Members int
	// Synchronous starts the cluster with Patroni's synchronous_mode on.
	Synchronous bool
	// BinDir is PostgreSQL's bin directory (default DefaultBinDir, or
	// SQLEASE_TEST_PG_BIN).
	BinDir string
	// TTL is Patroni's ttl in seconds (default DefaultTTL; at least 8).
	TTL int
}

// Cluster is a running etcd + Patroni cluster. Its methods may be called
// from any goroutine unless they take a testing.TB.
type Cluster struct {
	cfg     Config
	dir     string
	uid     int // -1: run as ourselves
	gid     int
	etcd    *exec.Cmd
	etcdURL string
	dog     func() // stops the watchdog (testserver.Watchdog)
	members []*Member
	Started time.Duration // how long Start took
}

// Member is one Patroni-managed PostgreSQL.
type Member struct {
	Name    string
	Port    int    // PostgreSQL's client port
	APIAddr string // Patroni's REST API, host:port
	dir     string
	dataDir string
	repl    *fleettest.Proxy // replication traffic: the member's connect_address
	c       *Cluster

	mu      sync.Mutex
	patroni *exec.Cmd
	exited  chan struct{}
	killed  bool
	cut     bool // the replication proxy is down
}

// PatroniBin is the Patroni program Start runs.
var PatroniBin = "patroni"

// Available reports why a cluster cannot be started here ("" if it can):
// the programs patroni and etcd and PostgreSQL's binaries must exist.
func Available() string {
	for _, p := range []string{PatroniBin, "etcd"} {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Sprintf("%s not found (apt-get install patroni etcd-server)", p)
		}
	}
	if _, err := os.Stat(filepath.Join(binDir(""), "postgres")); err != nil {
		return fmt.Sprintf("PostgreSQL not found in %s", binDir(""))
	}
	return ""
}

func binDir(d string) string {
	if d != "" {
		return d
	}
	if d := os.Getenv("SQLEASE_TEST_PG_BIN"); d != "" {
		return d
	}
	return DefaultBinDir
}

// Start starts etcd and the members, the first as the primary, and waits
// until every member is running and the primary accepts writes. It fails
// the test if anything does not come up within two minutes.
func Start(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	begin := time.Now()
	if cfg.Members == 0 {
		cfg.Members = DefaultMembers
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < 8 {
		t.Fatalf("hacluster: TTL %d: want at least 8 (loop_wait 1 + 2 × retry_timeout)", cfg.TTL)
	}
	cfg.BinDir = binDir(cfg.BinDir)
	if why := Available(); why != "" {
		t.Fatalf("hacluster: %s", why)
	}
	c := &Cluster{cfg: cfg, uid: -1, gid: -1}
	if os.Geteuid() == 0 {
		var err error
		if c.uid, c.gid, err = testserver.OSUser("postgres"); err != nil {
			t.Fatalf("hacluster: %v", err)
		}
	}
	dir, err := testserver.Dir("sqlease-ha-", c.uid, c.gid)
	if err != nil {
		t.Fatalf("hacluster: %v", err)
	}
	c.dir = dir
	// Should the test process die: kill every process whose pid file is in
	// the directory (etcd's, Patroni's) and the members' postmasters.
	if c.dog, err = testserver.Watchdog(dir, `for f in "$1"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
for f in "$1"/*/data/postmaster.pid; do [ -f "$f" ] && kill -QUIT "$(head -n 1 "$f")" 2>/dev/null; done
sleep 2`); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("hacluster: %v", err)
	}
	t.Cleanup(func() { c.stop(t) })

	if err := c.startEtcd(t); err != nil {
		t.Fatalf("hacluster: %v", err)
	}
	for i := range cfg.Members {
		m := &Member{Name: fmt.Sprintf("m%d", i+1), c: c}
		m.Port = port(fleettest.QuietAddr(t))
		m.APIAddr = fleettest.QuietAddr(t)
		m.dir = filepath.Join(dir, m.Name)
		m.dataDir = filepath.Join(m.dir, "data")
		m.repl = fleettest.NewProxy(t, fmt.Sprintf("127.0.0.1:%d", m.Port))
		if err := os.Mkdir(m.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := c.chown(m.dir); err != nil {
			t.Fatal(err)
		}
		if err := m.writeConfig(); err != nil {
			t.Fatalf("hacluster: %v", err)
		}
		c.members = append(c.members, m)
	}
	// The first member bootstraps the cluster; the others then clone it.
	if err := c.members[0].start(); err != nil {
		t.Fatalf("hacluster: %v", err)
	}
	if _, err := c.WaitPrimary(2*time.Minute, nil); err != nil {
		t.Fatalf("hacluster: %v\n%s", err, c.members[0].LogTail(40))
	}
	for _, m := range c.members[1:] {
		if err := m.start(); err != nil {
			t.Fatalf("hacluster: %v", err)
		}
	}
	if err := c.WaitHealthy(2 * time.Minute); err != nil {
		t.Fatalf("hacluster: %v\n%s", err, c.Logs(20))
	}
	c.Started = time.Since(begin)
	t.Logf("hacluster: %d members up in %v (dir %s, etcd %s)", cfg.Members, c.Started.Round(time.Millisecond), dir, c.etcdURL)
	return c
}

func port(addr string) int {
	_, p, _ := strings.Cut(addr, ":")
	n, _ := strconv.Atoi(p)
	return n
}

func (c *Cluster) chown(path string) error {
	if c.uid < 0 {
		return nil
	}
	return os.Chown(path, c.uid, c.gid)
}

func (c *Cluster) startEtcd(t testing.TB) error {
	client, peer := fleettest.QuietAddr(t), fleettest.QuietAddr(t)
	c.etcdURL = "http://" + client
	data := filepath.Join(c.dir, "etcd")
	cmd := exec.Command("etcd", "--name", "e1", "--data-dir", data,
		"--listen-client-urls", c.etcdURL, "--advertise-client-urls", c.etcdURL,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "e1=http://"+peer, "--log-level", "warn")
	logf, err := os.Create(filepath.Join(c.dir, "etcd.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting etcd: %v", err)
	}
	c.etcd = cmd
	go func() { _ = cmd.Wait() }()
	if err := os.WriteFile(filepath.Join(c.dir, "etcd.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(c.etcdURL + "/health")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if bytes.Contains(b, []byte(`"true"`)) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(c.dir, "etcd.log"))
			return fmt.Errorf("etcd at %s not healthy within 30s: %v\n%s", c.etcdURL, err, log)
		}
	}
}

// writeConfig writes the member's patroni.yml (JSON, which YAML reads).
func (m *Member) writeConfig() error {
	c := m.c
	params := map[string]any{
		"max_connections":             200,
		"fsync":                       "off",
		"wal_keep_size":               "128MB",
		"tcp_keepalives_idle":         5,
		"tcp_keepalives_interval":     2,
		"tcp_keepalives_count":        3,
		"wal_sender_timeout":          "5s",
		"wal_receiver_timeout":        "5s",
		"wal_retrieve_retry_interval": "500ms",
	}
	conf := map[string]any{
		"scope":    "sqlease-ha",
		"name":     m.Name,
		"log":      map[string]any{"level": "INFO"},
		"restapi":  map[string]any{"listen": m.APIAddr, "connect_address": m.APIAddr},
		"etcd3":    map[string]any{"hosts": []string{strings.TrimPrefix(c.etcdURL, "http://")}},
		"watchdog": map[string]any{"mode": "off"},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl": c.cfg.TTL, "loop_wait": 1, "retry_timeout": (c.cfg.TTL - 2) / 2,
				"synchronous_mode": c.cfg.Synchronous,
				"postgresql": map[string]any{
					"use_pg_rewind": true,
					"use_slots":     true,
					"parameters":    params,
				},
			},
			"initdb": []any{map[string]any{"encoding": "UTF8"}, map[string]any{"locale": "C"}},
		},
		"postgresql": map[string]any{
			"listen":          fmt.Sprintf("127.0.0.1:%d", m.Port),
			"connect_address": m.repl.Addr(),
			"data_dir":        m.dataDir,
			"bin_dir":         c.cfg.BinDir,
			"pgpass":          filepath.Join(m.dir, "pgpass"),
			"authentication": map[string]any{
				"superuser":   map[string]any{"username": "postgres", "password": "postgres"},
				"replication": map[string]any{"username": "replicator", "password": "replicator"},
				"rewind":      map[string]any{"username": "postgres", "password": "postgres"},
			},
			"parameters": map[string]any{"unix_socket_directories": m.dir},
			"pg_hba": []string{
				"local all all trust",
				"host all all 127.0.0.1/32 trust",
				"host replication all 127.0.0.1/32 trust",
			},
			"remove_data_directory_on_rewind_failure":     true,
			"remove_data_directory_on_diverged_timelines": true,
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(m.dir, "patroni.yml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return err
	}
	return m.c.chown(path)
}

// start runs the member's Patroni (which starts its PostgreSQL).
func (m *Member) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.patroni != nil {
		select {
		case <-m.exited:
		default:
			return fmt.Errorf("member %s is running", m.Name)
		}
	}
	logf, err := os.OpenFile(filepath.Join(m.dir, "patroni.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(PatroniBin, filepath.Join(m.dir, "patroni.yml"))
	cmd.Dir = m.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + m.dir, "LANG=C.UTF-8", "PGHOST=" + m.dir}
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if m.c.uid >= 0 {
		attr.Credential = &syscall.Credential{Uid: uint32(m.c.uid), Gid: uint32(m.c.gid)}
	}
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting patroni %s: %v", m.Name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	m.patroni, m.exited, m.killed = cmd, exited, false
	return os.WriteFile(filepath.Join(m.c.dir, m.Name+".patroni.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
}

// postmaster returns the pid in the member's postmaster.pid (0 if none).
func (m *Member) postmaster() int {
	b, err := os.ReadFile(filepath.Join(m.dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// children returns the pids of the processes whose parent is pid.
func children(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 2 {
			if pp, _ := strconv.Atoi(f[1]); pp == pid {
				out = append(out, child)
			}
		}
	}
	return out
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	if err != nil {
		return false
	}
	st := fleettest.ProcState(pid)
	return st != "" && st != "Z"
}

// Kill is the death of the member's host: SIGKILL of its Patroni, its
// postmaster and every child of the postmaster (backends, walsenders, the
// walreceiver), and waits until they are gone. Its clients see their
// connections reset only when the kernel closes the sockets (at once, on
// loopback).
func (m *Member) Kill() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	pm := m.postmaster()
	var victims []int
	if pm > 0 && alive(pm) {
		victims = append([]int{pm}, children(pm)...)
	}
	if m.patroni != nil {
		_ = m.patroni.Process.Kill()
	}
	for _, pid := range victims {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	m.killed = true
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range victims {
		for alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("member %s: pid %d still alive 10s after SIGKILL", m.Name, pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if m.exited != nil {
		select {
		case <-m.exited:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("member %s: patroni still alive 10s after SIGKILL", m.Name)
		}
	}
	return nil
}

// Restart starts a killed member's Patroni again on its data directory.
func (m *Member) Restart() error { return m.start() }

// Killed reports whether the member was killed and not restarted since.
func (m *Member) Killed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.killed
}

// CutReplication takes the member's replication proxy down: the standbys
// streaming from it lose their connections and cannot reconnect, while
// clients (on Port) are untouched. Cut the primary's to cut every standby off.
func (m *Member) CutReplication() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.cut {
		m.repl.Down()
		m.cut = true
	}
}

// RestoreReplication brings the replication proxy back (if it was cut).
func (m *Member) RestoreReplication(t testing.TB) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cut {
		m.repl.Up(t)
		m.cut = false
	}
}

// URL is a URL of database db on this member alone (superuser postgres).
func (m *Member) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", m.Port, db)
}

// LogTail returns the last n lines of the member's Patroni log (which
// includes PostgreSQL's, on stderr).
func (m *Member) LogTail(n int) string {
	b, _ := os.ReadFile(filepath.Join(m.dir, "patroni.log"))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("--- %s patroni.log ---\n%s", m.Name, strings.Join(lines, "\n"))
}

// Logs returns the last n lines of every member's log.
func (c *Cluster) Logs(n int) string {
	var parts []string
	for _, m := range c.members {
		parts = append(parts, m.LogTail(n))
	}
	return strings.Join(parts, "\n")
}

// Members returns the members, m1 first.
func (c *Cluster) Members() []*Member { return c.members }

// Member returns the member named name, or nil.
func (c *Cluster) Member(name string) *Member {
	for _, m := range c.members {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// DSN is the multi-host URL of database db on every member, as superuser
// postgres, with target_session_attrs=read-write: a client connects to
// whichever member is the primary.
func (c *Cluster) DSN(db string) string {
	var hosts []string
	for _, m := range c.members {
		hosts = append(hosts, fmt.Sprintf("127.0.0.1:%d", m.Port))
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		strings.Join(hosts, ","), db)
}

// MemberStatus is one member as Patroni's GET /cluster reports it.
type MemberStatus struct {
	Name     string `json:"name"`
	Role     string `json:"role"`  // leader, replica, sync_standby
	State    string `json:"state"` // running, starting, stopped, …
	Timeline int    `json:"timeline"`
	Lag      any    `json:"lag"` // bytes, or "unknown"
}

// Status is GET /cluster from the first member whose REST API answers.
func (c *Cluster) Status() ([]MemberStatus, error) {
	var last error
	for _, m := range c.members {
		if m.Killed() {
			continue
		}
		var out struct {
			Members []MemberStatus `json:"members"`
		}
		if err := m.api("GET", "/cluster", nil, &out); err != nil {
			last = err
			continue
		}
		return out.Members, nil
	}
	if last == nil {
		last = errors.New("no member running")
	}
	return nil, last
}

var httpClient = &http.Client{Timeout: 3 * time.Second}

func (m *Member) api(method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+m.APIAddr+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("patroni %s %s %s: %d %s", m.Name, method, path, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// Primary returns the member that Patroni's cluster view names leader
// and that is running, or nil.
func (c *Cluster) Primary() (*Member, MemberStatus, error) {
	st, err := c.Status()
	if err != nil {
		return nil, MemberStatus{}, err
	}
	for _, s := range st {
		if s.Role == "leader" && s.State == "running" {
			if m := c.Member(s.Name); m != nil && !m.Killed() {
				return m, s, nil
			}
		}
	}
	return nil, MemberStatus{}, nil
}

// KillPrimary kills old (kill -9 of its Patroni and PostgreSQL) and waits
// up to a minute for another member's promotion; it fails the test if
// either fails. It returns the new primary and when the kill began.
func (c *Cluster) KillPrimary(t testing.TB, old *Member) (next *Member, killed time.Time) {
	t.Helper()
	killed = time.Now()
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s (Patroni and PostgreSQL)", old.Name)
	next, err := c.WaitPrimary(time.Minute, old)
	if err != nil {
		t.Fatalf("no promotion: %v\n%s", err, c.Logs(30))
	}
	return next, killed
}

// WaitPrimary waits until a running member other than not is the leader
// and accepts writes on its port, and returns it.
func (c *Cluster) WaitPrimary(timeout time.Duration, not *Member) (*Member, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		m, _, err := c.Primary()
		switch {
		case err != nil:
			last = err
		case m == nil:
			last = errors.New("no leader")
		case m == not:
			last = fmt.Errorf("%s still leader", m.Name)
		default:
			if last = m.writable(); last == nil {
				return m, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("no writable primary within %v: %v", timeout, last)
}

func (m *Member) writable() error {
	var ro string
	if err := m.query(`SHOW transaction_read_only`, nil, &ro); err != nil {
		return err
	}
	if ro != "off" {
		return fmt.Errorf("%s is read-only", m.Name)
	}
	return nil
}

// WaitHealthy waits until there is a writable primary and every member not
// killed is running and streaming from it (a replica whose lag Patroni
// knows), and, in synchronous mode, one of them is the synchronous standby.
func (c *Cluster) WaitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	primary, err := c.WaitPrimary(timeout, nil)
	if err != nil {
		return err
	}
	var last error
	for time.Now().Before(deadline) {
		last = c.healthy(primary)
		if last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("cluster not healthy within %v: %v", timeout, last)
}

func (c *Cluster) healthy(primary *Member) error {
	st, err := c.Status()
	if err != nil {
		return err
	}
	byName := map[string]MemberStatus{}
	for _, s := range st {
		byName[s.Name] = s
	}
	syncMode, err := c.synchronousMode()
	if err != nil {
		return err
	}
	sync := 0
	for _, m := range c.members {
		if m.Killed() {
			continue
		}
		s, ok := byName[m.Name]
		switch {
		case !ok:
			return fmt.Errorf("%s not in the cluster view", m.Name)
		case s.State != "running" && s.State != "streaming":
			return fmt.Errorf("%s is %s", m.Name, s.State)
		case m == primary:
			if s.Role != "leader" {
				return fmt.Errorf("%s no longer leader", m.Name)
			}
			continue
		}
		if s.Role == "sync_standby" {
			sync++
		}
		if n, ok := s.Lag.(float64); !ok || n > 1<<20 {
			return fmt.Errorf("%s lag %v", m.Name, s.Lag)
		}
	}
	if n, err := primary.walsenders(); err != nil {
		return err
	} else if want := c.running() - 1; n < want {
		return fmt.Errorf("%d of %d standbys stream from %s", n, want, primary.Name)
	}
	if syncMode && c.running() > 1 && sync == 0 {
		return errors.New("synchronous mode without a synchronous standby yet")
	}
	return nil
}

func (c *Cluster) running() int {
	n := 0
	for _, m := range c.members {
		if !m.Killed() {
			n++
		}
	}
	return n
}

// walsenders counts the standbys streaming from m.
func (m *Member) walsenders() (int, error) {
	db, err := sql.Open("pgx", m.URL("postgres"))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var n int
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'`).Scan(&n)
	return n, err
}

func (c *Cluster) synchronousMode() (bool, error) {
	for _, m := range c.members {
		if m.Killed() {
			continue
		}
		var conf struct {
			Synchronous bool `json:"synchronous_mode"`
		}
		if err := m.api("GET", "/config", nil, &conf); err != nil {
			continue
		}
		return conf.Synchronous, nil
	}
	return false, errors.New("no member's REST API answers")
}

// SetSynchronous switches Patroni's synchronous_mode (PATCH /config) and
// waits until the cluster is healthy in the new mode: with it on, a
// standby is the synchronous one and the primary's synchronous_standby_names
// names it; off, the primary's synchronous_standby_names is empty.
func (c *Cluster) SetSynchronous(on bool, timeout time.Duration) error {
	primary, err := c.WaitPrimary(timeout, nil)
	if err != nil {
		return err
	}
	if err := primary.api("PATCH", "/config", map[string]any{"synchronous_mode": on}, nil); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		err := c.healthy(primary)
		if err == nil {
			var names string
			if names, err = primary.setting("synchronous_standby_names"); err == nil && (names != "") != on {
				err = fmt.Errorf("synchronous_standby_names = %q", names)
			}
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("synchronous_mode %v not in effect within %v: %v", on, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (m *Member) setting(name string) (string, error) {
	db, err := sql.Open("pgx", m.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var v string
	err = db.QueryRowContext(ctx, `SELECT current_setting($1)`, name).Scan(&v)
	return v, err
}

// CreateDatabase creates database name on the primary (it replicates).
func (c *Cluster) CreateDatabase(name string) error {
	db, err := c.primaryDB()
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err = db.Exec(`CREATE DATABASE ` + name); err != nil {
		return err
	}
	// A client of the multi-host DSN may try a standby first, and pgx gives
	// up on the other hosts when one answers that the database does not
	// exist: wait until every running member has replayed it.
	for _, m := range c.members {
		if m.Killed() {
			continue
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			var ok bool
			if err = m.query(`SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)`, []any{name}, &ok); err == nil && ok {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("database %s not on %s within a minute (%v)", name, m.Name, err)
			}
		}
	}
	return nil
}

// Exec runs a statement on the primary's database postgres.
func (c *Cluster) Exec(stmt string) error {
	db, err := c.primaryDB()
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Exec(stmt)
	return err
}

// primaryDB opens a pool on the primary's database postgres, once there is
// a primary (within a minute).
func (c *Cluster) primaryDB() (*sql.DB, error) {
	primary, err := c.WaitPrimary(time.Minute, nil)
	if err != nil {
		return nil, err
	}
	return postgres.Open(primary.URL("postgres"))
}

// query runs one single-row query on the member's PostgreSQL.
func (m *Member) query(q string, args []any, dest ...any) error {
	db, err := sql.Open("pgx", m.URL("postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return db.QueryRowContext(ctx, q, args...).Scan(dest...)
}

// Timeline returns the member's current timeline (on a primary, that of
// the WAL it writes).
func (m *Member) Timeline() (int64, error) {
	var tl int64
	err := m.query(`SELECT CASE WHEN pg_is_in_recovery() THEN (SELECT received_tli FROM pg_stat_wal_receiver)
		ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint END`, nil, &tl)
	return tl, err
}

// stop kills everything and removes the directory.
func (c *Cluster) stop(t testing.TB) {
	for _, m := range c.members {
		m.mu.Lock()
		if m.patroni != nil {
			_ = m.patroni.Process.Kill()
		}
		m.mu.Unlock()
		if pm := m.postmaster(); alive(pm) {
			_ = syscall.Kill(pm, syscall.SIGQUIT)
			for deadline := time.Now().Add(10 * time.Second); alive(pm) && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if alive(pm) {
				t.Errorf("hacluster: postmaster %d of %s did not stop", pm, m.Name)
			}
		}
	}
	if c.etcd != nil {
		_ = c.etcd.Process.Kill()
	}
	if t.Failed() {
		t.Logf("hacluster: logs at the end:\n%s", c.Logs(30))
	}
	if err := os.RemoveAll(c.dir); err != nil {
		t.Errorf("hacluster: %v", err)
	}
	if c.dog != nil {
		c.dog()
	}
}
