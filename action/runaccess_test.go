//go:build unix

package action

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sqlease/sqlease/scheduler"
)

// TestRunAccessExec: a command gets the node's API, its attempt's token
// and the earlier attempt's checkpoint (compacted to one line), none of
// them on a first attempt without RunAccess; the token never appears in
// the run's output.
func TestRunAccessExec(t *testing.T) {
	const token = "f00dfeedf00dfeedf00dfeedf00dfeedf00dfeedf00dfeed"
	out := filepath.Join(t.TempDir(), "env")
	script := `printf '%s\n' "${SQLEASE_API-unset}" "${SQLEASE_RUN_TOKEN-unset}" "${SQLEASE_CHECKPOINT-unset}" > "$1"; echo "my token is $SQLEASE_RUN_TOKEN"`
	spec := Spec{Exec: &Exec{Command: []string{"sh", "-c", script, "sh", out}}}

	run := testRun(t)
	run.Checkpoint = json.RawMessage("{\n  \"n\": 3,\n  \"s\": \"a b\"\n}")
	ctx, kept := scheduler.WithOutput(WithRunAccess(context.Background(), RunAccess{API: "http://127.0.0.1:8080", Token: token}), 4096)
	if err := spec.Run(ctx, run); err != nil {
		t.Fatalf("Run = %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "http://127.0.0.1:8080\n"+token+"\n"+`{"n":3,"s":"a b"}`+"\n"; got != want {
		t.Errorf("environment %q, want %q", got, want)
	}
	if got := kept(); strings.Contains(got, token) || !strings.Contains(got, Redaction) {
		t.Errorf("output %q shows the run token, or no redaction", got)
	}

	// A first attempt, outside a node: none of the three.
	run.Checkpoint = nil
	if err := spec.Run(context.Background(), run); err != nil {
		t.Fatalf("Run = %v", err)
	}
	b, _ = os.ReadFile(out)
	if got := string(b); got != "unset\nunset\nunset\n" {
		t.Errorf("environment of a first attempt %q, want all unset", got)
	}
}

// TestRunAccessHTTP: an HTTP action gets the same as headers, which the
// job's own headers cannot override.
func TestRunAccessHTTP(t *testing.T) {
	srv, seen := recordingServer(t, 200, "ok")
	s, err := Parse([]byte(`{"http": {"url": "` + srv.URL + `/hook", "headers": {"Sqlease-Run-Token": "forged", "Sqlease-Checkpoint": "{}"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	run := testRun(t)
	run.Checkpoint = json.RawMessage("[1,\n 2, \"\x7f\"]")
	ctx := WithRunAccess(context.Background(), RunAccess{API: "http://127.0.0.1:8080", Token: "t0k3n-t0k3n"})
	if err := s.Run(ctx, run); err != nil {
		t.Fatalf("Run = %v", err)
	}
	h := seen()[0].header
	for name, want := range map[string]string{"Sqlease-Api": "http://127.0.0.1:8080", "Sqlease-Run-Token": "t0k3n-t0k3n", "Sqlease-Checkpoint": `[1,2,"\u007f"]`} {
		if got := h.Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("header %s = %q, want exactly %q", name, got, want)
		}
	}
}
