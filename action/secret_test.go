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
	secretFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(secretFile, []byte("file-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOOK_TOKEN", "env-secret")
	raw := []byte(`{"http": {"url": "` + srv.URL + `/", "headers": {"Authorization": {"env": "HOOK_TOKEN"},
		"X-Signature-Key": {"file": "` + secretFile + `"}, "X-Team": "billing"}}}`)
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
	if red := string(Redact(raw)); !strings.Contains(red, "HOOK_TOKEN") || strings.Contains(red, "env-secret") || strings.Contains(red, "file-secret") {
		t.Fatalf("redacted form: %s", red)
	}
	os.Unsetenv("HOOK_TOKEN")
	err = s.Run(context.Background(), testRun(t))
	if err == nil || !strings.Contains(err.Error(), "HOOK_TOKEN is not set") || len(seen()) != 1 {
		t.Fatalf("a missing secret: %v, %d requests", err, len(seen()))
	}
	for _, bad := range []string{`{"env": "SQLEASE_API_TOKEN"}`, `{"env": "A B"}`, `{"file": "relative"}`, `{"env": "A", "file": "/x"}`, `{}`, `5`} {
		if _, err := Parse([]byte(`{"http": {"url": "http://127.0.0.1:9/", "headers": {"Authorization": ` + bad + `}}}`)); err == nil {
			t.Errorf("header value %s accepted", bad)
		}
	}
}
