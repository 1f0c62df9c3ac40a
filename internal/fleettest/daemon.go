package fleettest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// BuildDaemon builds cmd/sqlease into dir and returns the binary's path;
// with race, the binary has the race detector. Call it from TestMain (a
// cold build takes about a minute on two cores).
func BuildDaemon(dir string, race bool) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", fmt.Errorf("finding the module root: %w", err)
	}
	bin := filepath.Join(dir, "sqlease")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command(goTool(), append(args, "./cmd/sqlease")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sqlease in %s: %v\n%s", root, err, out)
	}
	return bin, nil
}

// Main is the TestMain of a package whose tests run daemons: it builds
// cmd/sqlease (BuildDaemon; with race, under the race detector) into a
// temporary directory, sets *bin, runs the tests and removes the directory,
// and returns the exit code for os.Exit. With build false (every test will
// skip) it builds nothing. name prefixes its error messages.
func Main(m *testing.M, name string, build, race bool, bin *string) int {
	if !build {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "sqlease-"+name+"-")
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *bin, err = BuildDaemon(dir, race); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1
	}
	return m.Run()
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// moduleRoot is the directory of the main module's go.mod.
func moduleRoot() (string, error) {
	if out, err := exec.Command(goTool(), "env", "GOMOD").Output(); err == nil {
		if p := strings.TrimSpace(string(out)); p != "" && p != os.DevNull {
			return filepath.Dir(p), nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// LogLine is one JSON log line of a daemon (--log-format json).
type LogLine struct {
	Time  time.Time      // the daemon's clock
	Level string         // INFO, WARN, …
	Msg   string         // the constant message, e.g. leader_acquired
	Attrs map[string]any // every field, Time, Level and Msg included
	Recv  time.Time      // test's clock when the line was read
}

// Int returns the integer attribute key (0 if absent).
func (l LogLine) Int(key string) int64 {
	switch v := l.Attrs[key].(type) {
	case float64:
		return int64(v)
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

// Str returns the attribute key as text ("" if absent).
func (l LogLine) Str(key string) string {
	switch v := l.Attrs[key].(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		return fmt.Sprint(v)
	}
}

func (l LogLine) String() string {
	b, _ := json.Marshal(l.Attrs)
	return l.Recv.Format("15:04:05.000") + " " + string(b)
}

// Daemons is a fleet of "sqlease serve" processes on one database, each
// with the same flags. Its methods must be called from the test goroutine,
// except the Node methods that say otherwise.
type Daemons struct {
	// DBFor, if set, gives each node its own database URL (e.g. through a
	// proxy of its own) instead of the fleet's.
	DBFor func(holder string) string
	// Env is added to every node's environment (from which the test's
	// SQLEASE_* variables are removed: flags decide).
	Env []string
	// Unkept names log messages (e.g. routine ones of a long run) kept in
	// the node's stderr file only, not in Log.
	Unkept map[string]bool

	t     testing.TB
	bin   string
	db    string
	flags []string
	dir   string

	mu    sync.Mutex
	nodes []*Node
}

// Node is one "sqlease serve" process.
type Node struct {
	*Proc
	Addr string // host:port of its HTTP API

	lines  Log[LogLine]
	unkept map[string]bool
}

// NewDaemons returns an empty fleet of daemons of binary bin on database
// URL db; every node gets flags (after --db, --holder-id, --http and
// --log-format json). Its cleanup kills every node still running, fails the
// test on a data race or panic in a node's log and, if the test failed,
// logs each node's warnings and log tail.
func NewDaemons(t testing.TB, bin, db string, flags ...string) *Daemons {
	d := &Daemons{t: t, bin: bin, db: db, flags: flags, dir: t.TempDir()}
	t.Cleanup(func() {
		var procs []*Proc
		for _, n := range d.Nodes() {
			procs = append(procs, n.Proc)
		}
		killOnCleanup(t, procs)
		for _, p := range procs {
			p.check(t)
		}
		if t.Failed() {
			for _, p := range procs {
				p.logStderr(t)
			}
		}
	})
	return d
}

// Nodes returns the nodes launched so far.
func (d *Daemons) Nodes() []*Node {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.nodes)
}

// Running returns the nodes whose process has not exited.
func (d *Daemons) Running() []*Node { return Unexited(d.Nodes()) }

// Unexited returns the nodes among ns whose process has not exited: ns may be
// a suite's own node type, which wraps a Node.
func Unexited[N interface{ Exited() bool }](ns []N) []N {
	var out []N
	for _, n := range ns {
		if !n.Exited() {
			out = append(out, n)
		}
	}
	return out
}

// Node returns the node whose holder id is holder, or nil.
func (d *Daemons) Node(holder string) *Node {
	for _, n := range d.Nodes() {
		if n.Holder == holder {
			return n
		}
	}
	return nil
}

// Start launches nodes n<i>… with the given holder ids at once, and waits
// until each serves HTTP and has seen the lease (leader or follower).
func (d *Daemons) Start(holders ...string) []*Node {
	d.t.Helper()
	nodes := make([]*Node, len(holders))
	for i, h := range holders {
		nodes[i] = d.Launch(h)
	}
	for _, n := range nodes {
		l := n.WaitLog(30*time.Second, "node_started", func(l LogLine) bool { return l.Msg == "node_started" })
		n.Addr = l.Str("http")
		n.WaitLog(30*time.Second, "a view of the lease", func(l LogLine) bool {
			return l.Msg == "leader_observed" || l.Msg == "leader_acquired"
		})
	}
	return nodes
}

// Launch starts one node (on a port of its own choosing) without waiting.
func (d *Daemons) Launch(holder string, extra ...string) *Node {
	d.t.Helper()
	db := d.db
	if d.DBFor != nil {
		db = d.DBFor(holder)
	}
	args := append([]string{"serve", "--db", db, "--holder-id", holder, "--http", "127.0.0.1:0",
		"--log-format", "json"}, d.flags...)
	cmd := exec.Command(d.bin, append(args, extra...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SQLEASE_") { // flags decide, not the caller's environment
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, d.Env...)
	n := &Node{unkept: d.Unkept}
	d.mu.Lock()
	idx := len(d.nodes)
	d.mu.Unlock()
	p, err := startProc(d.t, "daemon", d.dir, idx, holder, cmd, true, n.addLine, func(error) {})
	if err != nil {
		d.t.Fatalf("daemon: %v", err)
	}
	n.Proc = p
	d.mu.Lock()
	d.nodes = append(d.nodes, n)
	d.mu.Unlock()
	return n
}

// Shutdown sends SIGTERM to the given nodes (all if none given) and waits
// for them to exit; one that does not within timeout is killed and the test
// fails.
func (d *Daemons) Shutdown(timeout time.Duration, nodes ...*Node) {
	d.t.Helper()
	if len(nodes) == 0 {
		nodes = d.Nodes()
	}
	var procs []*Proc
	for _, n := range nodes {
		procs = append(procs, n.Proc)
	}
	shutdown(d.t, "daemon", timeout, procs)
}

func (n *Node) addLine(b []byte) {
	l := LogLine{Recv: time.Now()}
	if err := json.Unmarshal(b, &l.Attrs); err != nil {
		return // not a log line (e.g. a race report): kept in the file only
	}
	l.Msg, l.Level = l.Str("msg"), l.Str("level")
	if n.unkept[l.Msg] {
		return
	}
	l.Time, _ = time.Parse(time.RFC3339Nano, l.Str("time"))
	n.lines.Add(func(int) LogLine { return l })
}

// Log returns the node's log lines so far. Safe from any goroutine.
func (n *Node) Log() []LogLine { return n.lines.All() }

// Mark returns the position of the node's next log line.
func (n *Node) Mark() int { return n.lines.Len() }

// TryWaitLogFrom waits up to timeout for a log line at position from or
// later that matches pred. Safe from any goroutine.
func (n *Node) TryWaitLogFrom(from int, timeout time.Duration, pred func(LogLine) bool) (LogLine, bool) {
	return n.lines.TryWait(from, timeout, pred)
}

// WaitLog waits for a log line (from the start) matching pred and fails the
// test, naming what, on timeout.
func (n *Node) WaitLog(timeout time.Duration, what string, pred func(LogLine) bool) LogLine {
	n.t.Helper()
	l, ok := n.TryWaitLogFrom(0, timeout, pred)
	if !ok {
		n.t.Fatalf("daemon %s: no %s within %v", n.Holder, what, timeout)
	}
	return l
}

// URL returns the URL of path on the node's HTTP API.
func (n *Node) URL(path string) string { return "http://" + n.Addr + path }

var apiClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// Do sends a request to the node's API (body as JSON if not nil) and
// returns the status and the answer's body. Safe from any goroutine.
func (n *Node) Do(method, path string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, n.URL(path), r)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := apiClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Ready is a parsed /readyz answer.
type Ready struct {
	Code   int    // 0 if no answer
	Mode   string // leader, follower, stopping, unavailable
	Leader string
	Epoch  int64
	Body   string
}

// Readyz asks the node's /readyz. Safe from any goroutine.
func (n *Node) Readyz() Ready {
	code, body, err := n.Do("GET", "/readyz", nil)
	if err != nil {
		return Ready{Body: err.Error()}
	}
	r := Ready{Code: code, Body: strings.TrimSpace(string(body))}
	for _, kv := range strings.Fields(r.Body) {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "mode":
			r.Mode = v
		case "leader":
			r.Leader = v
		case "lease_epoch":
			r.Epoch, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return r
}
