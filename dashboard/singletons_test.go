package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/dashboard"
	"github.com/sqlease/sqlease/httpapi"
)

// singletonHost is the daemon's singleton host as the dashboard sees it
// when it may act: a list it pauses, resumes and deletes in.
type singletonHost struct {
	mu sync.Mutex
	ss []httpapi.Singleton
}

func (h *singletonHost) List(context.Context) ([]httpapi.Singleton, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]httpapi.Singleton(nil), h.ss...), nil
}

func (h *singletonHost) find(name string) (int, error) {
	for i, s := range h.ss {
		if s.Name == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("singleton %q: %w", name, sqlease.ErrNoJob)
}

func (h *singletonHost) Get(_ context.Context, name string) (httpapi.Singleton, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i, err := h.find(name)
	if err != nil {
		return httpapi.Singleton{}, err
	}
	return h.ss[i], nil
}

func (h *singletonHost) SetPaused(_ context.Context, name string, paused bool) (httpapi.Singleton, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i, err := h.find(name)
	if err != nil {
		return httpapi.Singleton{}, err
	}
	h.ss[i].Status = "running"
	if paused {
		h.ss[i].Status = "paused"
	}
	return h.ss[i], nil
}

func (h *singletonHost) Delete(_ context.Context, name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	i, err := h.find(name)
	if err != nil {
		return err
	}
	h.ss = append(h.ss[:i], h.ss[i+1:]...)
	return nil
}

func (h *singletonHost) status(name string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i, err := h.find(name); err == nil {
		return h.ss[i].Status
	}
	return "gone"
}

var _ dashboard.SingletonControl = (*singletonHost)(nil)

// TestSingletonActions: the singletons page shows a failing singleton's
// last error (escaped) and offers pause, resume and delete behind a
// confirmation, with the job actions' rules: a sign-in when a token is
// set, the form's CSRF token, same origin; a read-only list offers none.
func TestSingletonActions(t *testing.T) {
	const token = "dash-token-0123456789"
	host := &singletonHost{ss: []httpapi.Singleton{
		{Name: "ingest", Status: "failing", Holder: "node-b", Epoch: 3, Restarts: 4,
			LastError: "exit status 1: <b>no config</b>", LastErrorAt: "2026-01-02T03:04:05Z"},
		{Name: "report", Status: "running", Holder: "node-a", Epoch: 1},
	}}
	s := newSite(t, token, "127.0.0.1:0", func(c *dashboard.Config) { c.Singletons = host })
	for _, p := range []string{"/ui/singletons", "/ui/singletons/ingest/confirm?action=pause"} {
		if code, _, h := s.get(p); code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/ui/login?next=") {
			t.Errorf("%s without a sign-in: %d %s", p, code, h.Get("Location"))
		}
	}
	if code, _, _ := s.post("/ui/singletons/ingest/pause", url.Values{"csrf": {"x"}}); code != 403 || host.status("ingest") != "failing" {
		t.Fatalf("pause without a sign-in: %d", code)
	}
	if code, _, _ := s.post("/ui/login", url.Values{"token": {token}, "next": {"/ui/singletons"}}); code != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", code)
	}
	code, body, _ := s.get("/ui/singletons")
	if code != 200 {
		t.Fatalf("singletons page: %d", code)
	}
	for _, want := range []string{">failing<", "exit status 1: &lt;b&gt;no config&lt;/b&gt;", "2026-01-02T03:04:05Z",
		`href="/ui/singletons/ingest/confirm?action=pause"`, `href="/ui/singletons/ingest/confirm?action=delete"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the singletons page lacks %q", want)
		}
	}
	if code, _, _ := s.get("/ui/singletons/ingest/confirm?action=bogus"); code != 400 {
		t.Errorf("a bogus action's confirmation: %d", code)
	}
	if code, _, _ := s.get("/ui/singletons/absent/confirm?action=pause"); code != 404 {
		t.Errorf("an absent singleton's confirmation: %d", code)
	}
	code, body, _ = s.get("/ui/singletons/ingest/confirm?action=pause")
	m := csrfRe.FindStringSubmatch(body)
	if code != 200 || m == nil || !strings.Contains(body, `action="/ui/singletons/ingest/pause"`) {
		t.Fatalf("confirmation page: %d", code)
	}
	if code, _, _ := s.post("/ui/singletons/ingest/pause", url.Values{"csrf": {"stale"}}); code != 403 || host.status("ingest") != "failing" {
		t.Fatalf("a wrong CSRF token: %d", code)
	}
	if code, _, _ := s.post("/ui/singletons/ingest/pause", url.Values{"csrf": {m[1]}}, "Origin", "http://evil.example"); code != 403 || host.status("ingest") != "failing" {
		t.Fatalf("a cross-site post: %d", code)
	}
	if code, _, h := s.post("/ui/singletons/ingest/pause", url.Values{"csrf": {m[1]}}); code != http.StatusSeeOther ||
		host.status("ingest") != "paused" || h.Get("Location") != "/ui/singletons?done=pause" {
		t.Fatalf("the confirmed pause: %d %s, status %s", code, h.Get("Location"), host.status("ingest"))
	}
	if _, body, _ := s.get("/ui/singletons"); !strings.Contains(body, `href="/ui/singletons/ingest/confirm?action=resume"`) {
		t.Error("a paused singleton is not offered a resume")
	}
	if code, _, _ := s.post("/ui/singletons/ingest/resume", url.Values{"csrf": {m[1]}}); code != http.StatusSeeOther || host.status("ingest") != "running" {
		t.Fatalf("resume: %d", code)
	}
	if code, _, _ := s.post("/ui/singletons/ingest/trigger", url.Values{"csrf": {m[1]}}); code != 404 {
		t.Fatalf("an action singletons lack: %d", code)
	}
	if code, _, _ := s.post("/ui/singletons/report/delete", url.Values{"csrf": {m[1]}}); code != http.StatusSeeOther || host.status("report") != "gone" {
		t.Fatalf("delete: %d", code)
	}
	if code, _, _ := s.post("/ui/singletons/report/delete", url.Values{"csrf": {m[1]}}); code != 404 {
		t.Fatalf("delete of an absent singleton: %d", code)
	}

	// A read-only list, or a node read-only beyond loopback: no actions.
	ro := newSite(t, "", "127.0.0.1:0", func(c *dashboard.Config) { c.Singletons = singletonList(host.ss) })
	if _, body, _ := ro.get("/ui/singletons"); strings.Contains(body, "confirm?action=") {
		t.Error("a read-only singleton list offers actions")
	}
	if code, _, _ := ro.get("/ui/singletons/ingest/confirm?action=pause"); code != 403 {
		t.Errorf("a read-only list's confirmation: %d", code)
	}
	far := newSite(t, "", "0.0.0.0:8080", func(c *dashboard.Config) { c.Singletons = host })
	if _, body, _ := far.get("/ui/singletons"); strings.Contains(body, "confirm?action=") {
		t.Error("a node read-only beyond loopback offers singleton actions")
	}
	if code, _, _ := far.post("/ui/singletons/ingest/pause", url.Values{"csrf": {"x"}}); code != 403 || host.status("ingest") != "running" {
		t.Errorf("pause beyond loopback without a token: %d", code)
	}
}
