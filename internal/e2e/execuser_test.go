package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/syncbuf"
)

// The exec boundary (issue 11): an exec action runs as the daemon's user
// and could read /proc/$PPID/environ — the daemon's token and database
// password. With --exec-user it runs as another user and cannot. As root
// (CI): the action, run as nobody, finds the daemon's environ unreadable
// and the token appears in nothing it wrote. Not as root: --exec-user is
// refused at start with a configuration error (exit 2).
func TestExecUserCannotReadDaemonSecrets(t *testing.T) {
	const token = "e2e-secret-token-0123456789"
	// A directory the exec user can write (t.TempDir's parent is private).
	dir, err := os.MkdirTemp("", "sqlease-execuser-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command(binary, "serve", "--db", "sqlite:"+filepath.Join(dir, "s.db"), "--http", addr,
		"--exec-user", "nobody", "--lease-duration", "1s", "--renew-interval", "250ms", "--acquire-interval", "100ms")
	cmd.Env = append(nodeEnv(), "SQLEASE_API_TOKEN="+token)
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() != 0 {
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(out.String(), "root") {
			t.Fatalf("--exec-user without root: %v\n%s", err, out.String())
		}
		return
	}
	if _, err := user.Lookup("nobody"); err != nil {
		t.Fatalf("this machine has no user nobody: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	n := &node{holder: "x", addr: addr}
	if err := poll(20*time.Second, func() (bool, string) {
		code, body := n.get("/readyz")
		return code == 200 && strings.Contains(body, "mode=leader"), body
	}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	result := filepath.Join(dir, "result")
	script := fmt.Sprintf(`id -u > %[1]s.uid; cat /proc/$PPID/environ /proc/$PPID/cmdline > %[1]s 2>%[1]s.err; echo done >> %[1]s.uid`, result)
	body := fmt.Sprintf(`{"name":"peek","schedule":{},"action":{"exec":{"command":["sh","-c",%q]}}}`, script)
	resp, b := n.do(t, http.MethodPost, "/v1/jobs", token, []byte(body))
	if resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	if err := poll(20*time.Second, func() (bool, string) {
		b, _ := os.ReadFile(result + ".uid")
		return strings.Contains(string(b), "done"), string(b)
	}); err != nil {
		_, runs := n.get("/v1/jobs/peek/runs")
		t.Fatalf("%v\nruns: %s\n%s", err, runs, out.String())
	}
	nobody, _ := user.Lookup("nobody")
	if uid, _ := os.ReadFile(result + ".uid"); !strings.HasPrefix(string(uid), nobody.Uid+"\n") {
		t.Fatalf("the action ran as uid %q, want nobody's %s", uid, nobody.Uid)
	}
	got, _ := os.ReadFile(result)
	if strings.Contains(string(got), token) {
		t.Fatal("an exec action running as --exec-user read the daemon's token")
	}
	errText, _ := os.ReadFile(result + ".err")
	t.Logf("the action's attempt to read the daemon's environ: %s", strings.TrimSpace(string(errText)))
}
