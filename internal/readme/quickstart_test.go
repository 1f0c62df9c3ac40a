package readme

import (
	"bytes"
	"context"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// quickstartMarker precedes the README's quick-start block.
const quickstartMarker = "<!-- quickstart:"

// quickstart returns the shell block that follows the marker in the README.
func quickstart(t *testing.T) string {
	t.Helper()
	s := read(t, "README.md")
	i := strings.Index(s, quickstartMarker)
	if i < 0 {
		t.Fatalf("README.md has no %q marker", quickstartMarker)
	}
	s = s[i:]
	start := strings.Index(s, "\n```sh\n")
	if start < 0 {
		t.Fatal("no ```sh block after the quick-start marker")
	}
	s = s[start+len("\n```sh\n"):]
	end := strings.Index(s, "\n```\n")
	if end < 0 {
		t.Fatal("the quick-start block does not end")
	}
	return s[:end+1]
}

// copyModule copies the module's source (no .git, no images, no databases
// or binaries) into dir: a fresh clone, as far as go build can tell.
func copyModule(t *testing.T, from, dir string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		switch {
		case d.Name() == ".git" && d.IsDir():
			return filepath.SkipDir
		case d.Name() == ".git":
			// A worktree's .git is a file naming the repository's git
			// directory: copied, git commands in the copy would write there.
			return nil
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		case !d.Type().IsRegular(), strings.HasSuffix(p, ".png"), strings.Contains(d.Name(), ".db"), rel == "sqlease":
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestQuickstart pastes the README's quick-start block, as it is, into bash
// in a fresh copy of the module (a git repository of its own, so that the
// build is stamped as a clone's is), with PORT set to a free port: it must
// build the binary (once), start a node, create the job, see its run
// succeed, and stop the node, all within minutes at most.
func TestQuickstart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary: not in -short")
	}
	for _, tool := range []string{"bash", "curl", "git", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	block := quickstart(t)
	if !strings.Contains(block, "PORT=${PORT:-8080}") {
		t.Fatalf("the block no longer sets PORT=${PORT:-8080}: the test cannot give it a free port\n%s", block)
	}
	dir := t.TempDir()
	copyModule(t, root(t), dir)
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		// Only the copy's own repository, whatever the copy holds.
		cmd.Env = append(os.Environ(), "GIT_DIR="+filepath.Join(dir, ".git"), "GIT_WORK_TREE="+dir, "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir),
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
		t.Fatal("the copy has a .git of the original")
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "clone")

	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", block)
	cmd.Dir = dir
	// A user's shell: VCS stamping as by default (a CI machine may turn it
	// off with GOFLAGS=-buildvcs=false).
	goflags := "-buildvcs=auto"
	if raceBuild {
		goflags += " -race"
	}
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port), "GOFLAGS="+goflags)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	t.Logf("the quick start took %s:\n%s", took.Round(time.Millisecond), out.String())
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "sqlease.log"))
		t.Fatalf("the quick start failed: %v\nsqlease.log:\n%s", err, log)
	}
	got := out.String()
	for _, want := range []string{"mode=", `"name":"hello"`, "attempt 1 succeeded", "hello from hello/", "sqlease-leader"} {
		if !strings.Contains(got, want) {
			t.Errorf("the quick start's output lacks %q", want)
		}
	}
	// The node stopped with the block: its port is free again.
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second); err == nil {
		c.Close()
		t.Errorf("something still listens on port %d after the quick start", port)
	}
	if log, _ := os.ReadFile(filepath.Join(dir, "sqlease.log")); !bytes.Contains(log, []byte("msg=node_stopped")) {
		t.Errorf("the node did not stop gracefully; sqlease.log:\n%s", log)
	}

	// The binary the block built says which commit it is (a clone's build
	// is stamped), not "(devel)".
	head, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	v, err := exec.Command(filepath.Join(dir, "sqlease"), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(v), "commit "+strings.TrimSpace(string(head))) || strings.Contains(string(v), "(devel)") {
		t.Errorf("sqlease version: %q, want the commit %s", v, head)
	}
}
