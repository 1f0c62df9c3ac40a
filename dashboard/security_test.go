package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/action"
	"github.com/sqlease/sqlease/dashboard"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/httpapi"
)

// The secrets of issue 30, item 2: an HTTP action's URL password and its
// Authorization header, and a singleton's environment.
const (
	urlSecret    = "DBpassw0rd"
	headerSecret = "PROD-TOKEN"
	envSecret    = "ENV-S3CRET"
	testToken    = "dash-token-0123456789"
)

var hrefRe = regexp.MustCompile(`href="(/[^"]*)"`)

// signIn signs s's client in with the token.
func (s *site) signIn(token string) {
	s.t.Helper()
	if code, _, h := s.post("/ui/login", url.Values{"token": {token}, "next": {"/"}}); code != http.StatusSeeOther {
		s.t.Fatalf("sign-in: %d %s", code, h.Get("Location"))
	}
}

// TestNoSecretOnAnyPage (issue 30, item 2): with secrets in a job's HTTP
// action, in a singleton's definition (as stored, where the dashboard must
// not read it, and as the singleton host lists it, redacted) and in runs,
// no page the dashboard serves shows one: every page reachable by a link
// from the overview, every confirmation page and the live-refresh
// fragments. A new page that skips redaction fails here.
func TestNoSecretOnAnyPage(t *testing.T) {
	listed := singletonList{{Name: "ingest", Command: []string{"/bin/ingest", "--db", "postgres://u:***@db/x"}, Status: "running",
		Env: map[string]action.EnvValue{"DB_PASSWORD": {Value: "***"}, "REGION": {Value: "eu"}}, State: []byte(`{"cursor":41}`)}}
	s := newSite(t, testToken, "127.0.0.1:0", func(c *dashboard.Config) { c.Singletons = listed })
	ctx := context.Background()
	act := `{"http":{"url":"https://svc:` + urlSecret + `@host.example/hook","method":"POST","headers":{"Authorization":"Bearer ` + headerSecret + `","X-Api-Key":"` + headerSecret + `"}}}`
	for _, name := range []string{"hook", "hook-paused"} {
		if _, _, err := s.sched.Create(ctx, sqlease.Job{Name: name, Schedule: sqlease.Schedule{Every: time.Hour}, Action: json.RawMessage(act)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.sched.Pause(ctx, "hook-paused"); err != nil {
		t.Fatal(err)
	}
	// A singleton row as stored, with its secret: the dashboard must show
	// the host's (redacted) list, never its own reading of the rows.
	spec := `{"name":"ingest","command":["/bin/ingest"],"env":{"DB_PASSWORD":"` + envSecret + `"}}`
	if _, _, err := s.store.CreateSingleton(ctx, "ingest", []byte(spec), "h1"); err != nil {
		t.Fatal(err)
	}
	at := "2026-01-01 00:00:00.000"
	s.finishedRun("hook", at, "failed", "http action: POST https://svc:***@host.example/hook: 500", "")
	s.signIn(testToken)

	seen := map[string]bool{}
	queue := []string{"/", "/ui/jobs", "/ui/history", "/ui/singletons", "/ui/jobs/hook", "/ui/jobs/hook-paused"}
	for _, job := range []string{"hook", "hook-paused"} {
		for _, a := range []string{"pause", "resume", "trigger", "delete"} {
			queue = append(queue, "/ui/jobs/"+job+"/confirm?action="+a)
		}
	}
	shownRedacted := false
	for len(queue) > 0 && len(seen) < 300 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] || strings.HasPrefix(p, "/ui/static/") || strings.HasPrefix(p, "/v1/") || strings.Contains(p, "/ui/login") {
			continue
		}
		seen[p] = true
		for _, variant := range []string{p, p + sep(p) + "fragment=1"} {
			code, body, _ := s.get(variant)
			if code >= 500 {
				t.Errorf("%s: %d", variant, code)
			}
			for _, secret := range []string{urlSecret, headerSecret, envSecret} {
				if strings.Contains(body, secret) {
					t.Errorf("%s shows the secret %q", variant, secret)
				}
			}
			if strings.Contains(body, "svc:***@host.example") && !strings.Contains(body, "Bearer") {
				shownRedacted = true
			}
			for _, m := range hrefRe.FindAllStringSubmatch(body, -1) {
				queue = append(queue, strings.ReplaceAll(m[1], "&amp;", "&"))
			}
		}
	}
	if !shownRedacted {
		t.Error("no page shows the action redacted (svc:***@host.example, the header as ***)")
	}
	for _, p := range []string{"/", "/ui/jobs", "/ui/history", "/ui/singletons", "/ui/jobs/hook"} {
		if !seen[p] {
			t.Errorf("%s was not visited", p)
		}
	}
	t.Logf("%d pages checked", len(seen))
}

func sep(p string) string {
	if strings.Contains(p, "?") {
		return "&"
	}
	return "?"
}

// TestSafeNext (issue 30, item 13): after a sign-in, next leads only to
// "/" or a path under /ui/ of this site; every hostile form leads to "/".
func TestSafeNext(t *testing.T) {
	s := newSite(t, testToken, "127.0.0.1:0")
	d := handler(t, s)
	for _, c := range []struct{ next, want string }{
		{"/ui/jobs", "/ui/jobs?done=login"},
		{"/ui/jobs?state=paused", "/ui/jobs?state=paused&done=login"},
		{"/ui/jobs/payroll", "/ui/jobs/payroll?done=login"},
		{"/", "/?done=login"},
		{"", "/?done=login"},
		{"//evil.example/x", "/?done=login"},
		{"/\\evil.example/x", "/?done=login"},
		{"/\t/evil.example/x", "/?done=login"},
		{"/%09/evil.example/x", "/?done=login"},
		{"/%2F%2Fevil.example/x", "/?done=login"},
		{"/%2f/evil.example", "/?done=login"},
		{"/ui/%2F%2Fevil.example", "/?done=login"},
		{"/%5Cevil.example", "/?done=login"},
		{"/%255C%255Cevil.example", "/?done=login"},
		{"https://evil.example/", "/?done=login"},
		{"http:evil.example", "/?done=login"},
		{"javascript:alert(1)", "/?done=login"},
		{"/ui/../..//evil.example", "/?done=login"},
		{"/ui/../../evil", "/?done=login"},
		{"/ui/jobs\r\nSet-Cookie: x=1", "/?done=login"},
		{"/ui/%0d%0aSet-Cookie:x", "/?done=login"},
		{"/ui/jobs#frag", "/?done=login"},
		{"/v1/jobs", "/?done=login"},
		{"/\u2028/evil.example", "/?done=login"},
		{"evil.example", "/?done=login"},
	} {
		w := loginFrom(d, "192.0.2.1:1", "", strings.NewReader(url.Values{"token": {testToken}, "next": {c.next}}.Encode()))
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != c.want {
			t.Errorf("next=%q: %d Location %q, want %q", c.next, w.Code, w.Header().Get("Location"), c.want)
		}
	}
}

// handler is a dashboard served directly, for requests from chosen
// client addresses.
func handler(t testing.TB, s *site, opts ...func(*dashboard.Config)) *dashboard.Dashboard {
	t.Helper()
	el, err := election.New(election.Config{Store: s.store, LeaseName: "lead", HolderID: "node-b"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := dashboard.Config{Store: s.store, Scheduler: s.sched, Elector: el, APIToken: testToken, ListenAddr: "127.0.0.1:0"}
	for _, o := range opts {
		o(&cfg)
	}
	d, err := dashboard.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func loginFrom(d http.Handler, remote, token string, body io.Reader) *httptest.ResponseRecorder {
	if body == nil {
		body = strings.NewReader(url.Values{"token": {token}, "next": {"/"}}.Encode())
	}
	req := httptest.NewRequest("POST", "/ui/login", body)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = remote
	w := httptest.NewRecorder()
	d.ServeHTTP(w, req)
	return w
}

// blockingBody signals its first Read and then blocks until closed: a
// body that is never sent.
type blockingBody struct {
	reading chan struct{}
	release chan struct{}
	once    bool
}

func (b *blockingBody) Read([]byte) (int, error) {
	if !b.once {
		b.once = true
		close(b.reading)
	}
	<-b.release
	return 0, io.ErrUnexpectedEOF
}

// TestSignInLimitPerClient (issue 30, items 10 and 4): a client guessing
// is answered 429 with Retry-After, before its body is read, while another
// client signs in at once; a client may not hold more than two sign-ins
// open reading their bodies.
func TestSignInLimitPerClient(t *testing.T) {
	s := newSite(t, testToken, "127.0.0.1:0")
	d := handler(t, s)
	limited := false
	for range 20 {
		w := loginFrom(d, "198.51.100.7:4000", "guess", nil)
		if w.Code == http.StatusTooManyRequests {
			if w.Header().Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
			limited = true
			break
		}
		if w.Code != http.StatusUnauthorized {
			t.Fatalf("a wrong token: %d", w.Code)
		}
	}
	if !limited {
		t.Fatal("20 wrong sign-ins from one client were all answered")
	}
	// Another client signs in with the right token at once, and a wrong
	// one of its own is answered 401, not 429.
	if w := loginFrom(d, "203.0.113.9:5000", testToken, nil); w.Code != http.StatusSeeOther {
		t.Fatalf("another client's correct token: %d %s", w.Code, w.Body.String())
	}
	if w := loginFrom(d, "[2001:db8:1::5]:5000", "wrong", nil); w.Code != http.StatusUnauthorized {
		t.Fatalf("another client's first wrong token: %d", w.Code)
	}
	// The guessing client is refused before its body is read: a body that
	// never comes does not hold the request.
	done := make(chan int, 1)
	go func() {
		b := &blockingBody{reading: make(chan struct{}), release: make(chan struct{})}
		defer close(b.release)
		done <- loginFrom(d, "198.51.100.7:4001", "", b).Code
	}()
	select {
	case code := <-done:
		if code != http.StatusTooManyRequests {
			t.Fatalf("the limited client: %d", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the limited client's body is being read")
	}
	// Slow bodies: two sign-ins of one client may wait for their bodies;
	// a third is refused at once.
	var bodies []*blockingBody
	results := make(chan int, 3)
	for range 2 {
		b := &blockingBody{reading: make(chan struct{}), release: make(chan struct{})}
		bodies = append(bodies, b)
		go func() { results <- loginFrom(d, "192.0.2.44:1", "", b).Code }()
		<-b.reading
	}
	third := &blockingBody{reading: make(chan struct{}), release: make(chan struct{})}
	go func() { results <- loginFrom(d, "192.0.2.44:2", "", third).Code }()
	select {
	case code := <-results:
		if code != http.StatusTooManyRequests {
			t.Errorf("a third slow sign-in of one client: %d", code)
		}
	case <-third.reading:
		t.Error("a third slow sign-in of one client is being read")
		close(third.release)
		<-results
	case <-time.After(5 * time.Second):
		t.Error("a third slow sign-in of one client hangs")
	}
	for _, b := range bodies {
		close(b.release)
		<-results
	}
}

// cookieOf returns the session cookie's value set by h, "".
func cookieOf(h http.Header) string {
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == "sqlease_dashboard" {
			return c.Value
		}
	}
	return ""
}

// TestSignOutRevokes (issue 30, item 18): a session cookie copied before
// the sign-out is refused after it, by this node and by another dashboard
// on the same database, which accepted it before.
func TestSignOutRevokes(t *testing.T) {
	s := newSite(t, testToken, "127.0.0.1:0")
	s.job("payroll", false)
	_, _, h := s.post("/ui/login", url.Values{"token": {testToken}, "next": {"/"}})
	stolen := cookieOf(h)
	if stolen == "" {
		t.Fatal("no session cookie")
	}
	other := handler(t, s)
	getWith := func(d http.Handler, path string) int {
		req := httptest.NewRequest("GET", path, nil)
		req.AddCookie(&http.Cookie{Name: "sqlease_dashboard", Value: stolen})
		w := httptest.NewRecorder()
		d.ServeHTTP(w, req)
		return w.Code
	}
	if code := getWith(other, "/ui/jobs/payroll"); code != http.StatusOK {
		t.Fatalf("another node before the sign-out: %d", code)
	}
	code, body, _ := s.get("/ui/jobs/payroll/confirm?action=pause")
	m := csrfRe.FindStringSubmatch(body)
	if code != 200 || m == nil {
		t.Fatalf("confirmation page: %d, CSRF token found: %v", code, m != nil)
	}
	if code, _, _ := s.post("/ui/logout", url.Values{"csrf": {m[1]}}); code != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", code)
	}
	// The copy, on this node and on the other.
	jar, _ := cookiejar.New(nil)
	u, _ := url.Parse(s.srv.URL)
	jar.SetCookies(u, []*http.Cookie{{Name: "sqlease_dashboard", Value: stolen, Path: "/"}})
	c := &http.Client{Jar: jar, CheckRedirect: s.client.CheckRedirect}
	res, err := c.Get(s.srv.URL + "/ui/jobs/payroll")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/ui/login") {
		t.Errorf("the copied cookie after the sign-out, same node: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	if code := getWith(other, "/ui/jobs/payroll"); code != http.StatusSeeOther {
		t.Errorf("the copied cookie after the sign-out, another node: %d", code)
	}
	if code := getWith(handler(t, s), "/"); code != http.StatusSeeOther {
		t.Errorf("the copied cookie after the sign-out, a node started after it: %d", code)
	}
	// The copy cannot act either.
	req := httptest.NewRequest("POST", "/ui/jobs/payroll/pause", strings.NewReader(url.Values{"csrf": {m[1]}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: "sqlease_dashboard", Value: stolen})
	w := httptest.NewRecorder()
	other.ServeHTTP(w, req)
	if j, err := s.sched.Job(context.Background(), "payroll"); err != nil || j.Paused || w.Code != http.StatusForbidden {
		t.Errorf("a pause with the revoked cookie: %d, paused %v (%v)", w.Code, j.Paused, err)
	}
}

// TestSecureCookie (issue 30, item 19): the session cookie is Secure over
// TLS, always with SecureCookies, and with TrustForwardedProto when the
// proxy says https; otherwise not.
func TestSecureCookie(t *testing.T) {
	s := newSite(t, testToken, "127.0.0.1:0")
	secure := func(d http.Handler, tls bool, proto string) bool {
		body := strings.NewReader(url.Values{"token": {testToken}}.Encode())
		req := httptest.NewRequest("POST", "/ui/login", body)
		if tls {
			req = httptest.NewRequest("POST", "https://node.example/ui/login", body)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if proto != "" {
			req.Header.Set("X-Forwarded-Proto", proto)
		}
		w := httptest.NewRecorder()
		d.ServeHTTP(w, req)
		if w.Code != http.StatusSeeOther {
			t.Fatalf("sign-in: %d", w.Code)
		}
		c := w.Result().Cookies()
		return len(c) == 1 && c[0].Secure
	}
	plain := handler(t, s)
	always := handler(t, s, func(c *dashboard.Config) { c.SecureCookies = true })
	proxied := handler(t, s, func(c *dashboard.Config) { c.TrustForwardedProto = true })
	for _, c := range []struct {
		name  string
		d     http.Handler
		tls   bool
		proto string
		want  bool
	}{
		{"plain http", plain, false, "", false},
		{"plain http, X-Forwarded-Proto not trusted", plain, false, "https", false},
		{"TLS", plain, true, "", true},
		{"SecureCookies", always, false, "", true},
		{"TrustForwardedProto, https", proxied, false, "https", true},
		{"TrustForwardedProto, https first of two", proxied, false, "HTTPS, http", true},
		{"TrustForwardedProto, http", proxied, false, "http", false},
		{"TrustForwardedProto, no header", proxied, false, "", false},
	} {
		if got := secure(c.d, c.tls, c.proto); got != c.want {
			t.Errorf("%s: Secure = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestPageBudget (issue 30, items 3 and 7): a job with 60 runs of 64 KiB
// output each, and 40 singletons of about 1 MB state and env each: every
// page stays within the budget (1 MiB) and offers the rest on next pages.
func TestPageBudget(t *testing.T) {
	big := strings.Repeat("<x>", 64<<10/3)
	var ss singletonList
	for i := range 40 {
		ss = append(ss, httpapi.Singleton{Name: fmt.Sprintf("s%02d", i), Status: "running", Command: []string{"/bin/run", strings.Repeat("a", 1000)},
			Env: map[string]action.EnvValue{"BLOB": {Value: strings.Repeat("e", 500<<10)}}, State: json.RawMessage(`"` + strings.Repeat("s", 500<<10) + `"`)})
	}
	s := newSite(t, "", "127.0.0.1:0", func(c *dashboard.Config) { c.Singletons = ss })
	s.job("echo", false)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 60 {
		at := base.Add(time.Duration(i) * time.Minute).Format("2006-01-02 15:04:05.000")
		s.finishedRun("echo", at, "failed", fmt.Sprintf("boom-%03d", i), big)
	}
	const limit = dashboard.DefaultPageBudget + 64<<10 // the page's own markup besides
	next := regexp.MustCompile(`href="([^"]+)" rel="next"`)
	follow := func(path string, item *regexp.Regexp) (items []string, pages int) {
		t.Helper()
		return s.follow(path, item, next, 30, limit)
	}
	runs, pages := follow("/ui/jobs/echo", regexp.MustCompile(`boom-(\d+)`))
	if len(runs) != 60 || pages < 4 {
		t.Errorf("runs: %d in %d pages, want 60 in at least 4", len(runs), pages)
	}
	singles, pages := follow("/ui/singletons", regexp.MustCompile(`<th scope="row">(s\d+)</th>`))
	if len(singles) != 40 || pages < 20 {
		t.Errorf("singletons: %d in %d pages, want 40 in at least 20", len(singles), pages)
	}
	for _, p := range []string{"/", "/?fragment=1"} {
		code, body, _ := s.get(p)
		if code != 200 || len(body) > limit {
			t.Errorf("%s: %d, %d bytes (limit %d)", p, code, len(body), limit)
		}
		if !strings.Contains(body, `href="/ui/singletons"`) || !strings.Contains(body, "in all") {
			t.Errorf("%s: no cut state with its size, or no link to the singletons", p)
		}
	}
}
