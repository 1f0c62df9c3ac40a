package action

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A header may name its secret instead of holding it: {"env": "NAME"} or
// {"file": "/path"} is read by the node when it sends, so the secret is
// neither stored nor shown; a missing one fails the run with a clear error
// and sends nothing.
func TestSecretHeaderReferences(t *testing.T) {
	srv, seen := recordingServer(t, 200, "ok")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("file-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(outside, []byte("not-for-actions"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SQLEASE_SECRETS_DIR", dir)
	t.Setenv("SQLEASE_SECRET_HOOK_TOKEN", "env-secret")
	raw := []byte(`{"http": {"url": "` + srv.URL + `/", "headers": {"Authorization": {"env": "SQLEASE_SECRET_HOOK_TOKEN"},
		"X-Signature-Key": {"file": "token"}, "X-Team": "billing"}}}`)
	s, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background(), testRun(t)); err != nil {
		t.Fatal(err)
	}
	r := seen()[0]
	if r.header.Get("Authorization") != "env-secret" || r.header.Get("X-Signature-Key") != "file-secret" || r.header.Get("X-Team") != "billing" {
		t.Fatalf("headers sent: %v", r.header)
	}
	// Reads show the references: nothing secret in them.
	if red := string(Redact(raw)); !strings.Contains(red, "SQLEASE_SECRET_HOOK_TOKEN") || strings.Contains(red, "env-secret") || strings.Contains(red, "file-secret") {
		t.Fatalf("redacted form: %s", red)
	}
	os.Unsetenv("SQLEASE_SECRET_HOOK_TOKEN")
	err = s.Run(context.Background(), testRun(t))
	if err == nil || !strings.Contains(err.Error(), "SQLEASE_SECRET_HOOK_TOKEN is not set") || len(seen()) != 1 {
		t.Fatalf("a missing secret: %v, %d requests", err, len(seen()))
	}
	// A symbolic link out of the secrets directory is not followed out.
	esc, err := Parse([]byte(`{"http": {"url": "` + srv.URL + `/", "headers": {"X-Key": {"file": "escape"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := esc.Run(context.Background(), testRun(t)); err == nil || len(seen()) != 1 {
		t.Fatalf("a file outside the secrets directory was sent: %v, %d requests", err, len(seen()))
	}
	for _, bad := range []string{`{"env": "SQLEASE_API_TOKEN"}`, `{"env": "HOME"}`, `{"env": "AWS_SECRET_ACCESS_KEY"}`, `{"env": "SQLEASE_SECRET_"}`, `{"env": "A B"}`,
		`{"file": "/etc/shadow"}`, `{"file": "../x"}`, `{"env": "SQLEASE_SECRET_A", "file": "x"}`, `{}`, `5`} {
		if _, err := Parse([]byte(`{"http": {"url": "http://127.0.0.1:9/", "headers": {"Authorization": ` + bad + `}}}`)); err == nil {
			t.Errorf("header value %s accepted", bad)
		}
	}
}
