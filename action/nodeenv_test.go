package action

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/sqlease/sqlease/scheduler"
)

// TestNodeEnvSnapshot: with the node's environment read once
// (SnapshotNodeEnv, as the daemon does when a node starts), every source
// of a secret is still redacted from an HTTP action's and a command's
// output: a SQLEASE_SECRET_* value and a proxy password of the snapshot, a
// value registered after it, a secret the action references (read when
// the run resolves it, even if set after the snapshot), the run's token. A
// variable set after the snapshot is a node secret from the next one on.
func TestNodeEnvSnapshot(t *testing.T) {
	const (
		envSecret   = "snap-env-secret-1"
		proxyPass   = "all-proxy-pass-2"
		registered  = "registered-after-snap-3"
		refSecret   = "referenced-secret-4"
		runToken    = "run-token-5-0123456789abcdef"
		lateSecret  = "late-env-secret-6"
		otherSecret = "never-a-secret-7"
	)
	t.Setenv("SQLEASE_SECRET_SNAP", envSecret)
	t.Setenv("ALL_PROXY", "socks5://user:"+proxyPass+"@127.0.0.1:9") // net/http reads no ALL_PROXY
	SnapshotNodeEnv()
	t.Cleanup(func() { nodeEnv.Store(nil) })
	t.Setenv("SQLEASE_SECRET_REF", refSecret)
	t.Setenv("SQLEASE_SECRET_LATE", lateSecret)
	all := []string{envSecret, proxyPass, registered, refSecret, runToken, lateSecret, otherSecret}
	echo := strings.Join(all, " ")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, echo) }))
	defer srv.Close()
	hook, err := Parse([]byte(`{"http": {"url": "` + srv.URL + `", "headers": {"X-Api-Key": {"env": "SQLEASE_SECRET_REF"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	cmd := Spec{Exec: &Exec{Command: []string{"printf", "%s\n", echo}}}
	run := func(s Spec) string {
		t.Helper()
		ctx, kept := scheduler.WithOutput(context.Background(), 4096)
		ctx = WithRunAccess(ctx, RunAccess{API: "http://127.0.0.1:1", Token: runToken})
		if err := s.Run(ctx, testRun(t)); err != nil {
			t.Fatal(err)
		}
		return kept()
	}
	_ = run(hook) // the runs' shared list built before the value below is registered
	AddNodeSecrets(registered)
	check := func(when string, redacted map[string][]string) {
		t.Helper()
		for name, s := range map[string]Spec{"http": hook, "exec": cmd} {
			out := run(s)
			for _, v := range all {
				want := !slices.Contains(redacted[name], v)
				if strings.Contains(out, v) != want {
					t.Errorf("%s, %s action: output %q: %q shown %v, want %v", when, name, out, v, !want, want)
				}
			}
		}
	}
	// The command references no secret: the one set after the snapshot
	// shows in its output until the next snapshot.
	check("after the snapshot", map[string][]string{
		"http": {envSecret, proxyPass, registered, refSecret, runToken},
		"exec": {envSecret, proxyPass, registered, runToken},
	})
	SnapshotNodeEnv()
	every := []string{envSecret, proxyPass, registered, refSecret, runToken, lateSecret}
	check("after the next snapshot", map[string][]string{"http": every, "exec": every})
}

// TestSecretFormsCacheRefills: once the forms cache has filled (with run
// tokens, each a secret once), a secret first seen later is cached too,
// and the cache stays bounded.
func TestSecretFormsCacheRefills(t *testing.T) {
	forms.Clear()
	formsCount.Store(0)
	t.Cleanup(func() { forms.Clear(); formsCount.Store(0) })
	for i := range 3 * maxForms {
		secretForms(fmt.Sprintf("run-token-%08d", i))
	}
	secretForms("a-new-action-secret")
	if _, ok := forms.Load("a-new-action-secret"); !ok {
		t.Error("a secret first seen after the cache filled is not cached")
	}
	n := 0
	forms.Range(func(any, any) bool { n++; return true })
	if n > maxForms+1 {
		t.Errorf("%d forms cached, want at most about %d", n, maxForms)
	}
}
