package dashboard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
)

// FuzzForms posts arbitrary bodies to the dashboard's forms (sign-in,
// sign-out, the job actions), with or without a valid session and its
// CSRF token: never a panic, never a 5xx, never a change to the job
// without both, and never a session without the token in the body.
func FuzzForms(f *testing.F) {
	for _, seed := range []struct {
		target       uint8
		body, ctype  string
		session, tok bool
		origin       string
	}{
		{0, "token=" + testToken + "&next=/ui/jobs", "application/x-www-form-urlencoded", false, false, ""},
		{0, "token=wrong&next=//evil", "application/x-www-form-urlencoded", false, false, ""},
		{0, "token=%zz&next=%", "application/x-www-form-urlencoded", false, false, ""},
		{0, strings.Repeat("a", 5000), "application/x-www-form-urlencoded", false, false, ""},
		{0, "token=" + testToken, "application/x-www-form-urlencoded", false, false, "http://evil.example"},
		{0, "--b\r\nContent-Disposition: form-data; name=\"token\"\r\n\r\n" + testToken + "\r\n--b--", "multipart/form-data; boundary=b", false, false, ""},
		{1, "", "application/x-www-form-urlencoded", true, true, ""},
		{1, "csrf=x", "application/x-www-form-urlencoded", true, false, ""},
		{2, "", "application/x-www-form-urlencoded", true, true, ""},
		{2, "csrf=", "application/x-www-form-urlencoded", true, false, ""},
		{2, "", "application/x-www-form-urlencoded", false, true, ""},
		{3, "", "application/x-www-form-urlencoded", true, true, "null"},
		{4, "", "text/plain", true, true, ""},
		{5, "csrf=a&csrf=b", "application/x-www-form-urlencoded", true, false, ""},
		{6, "x=" + strings.Repeat("%00", 100), "application/x-www-form-urlencoded", true, true, ""},
		{7, "\xff\xfe", "", true, false, ""},
	} {
		f.Add(seed.target, seed.body, seed.ctype, seed.session, seed.tok, seed.origin)
	}
	s := newSite(f, testToken, "127.0.0.1:0")
	s.job("payroll", false)
	d := handler(f, s)
	targets := []string{"/ui/login", "/ui/logout", "/ui/jobs/payroll/pause", "/ui/jobs/payroll/resume", "/ui/jobs/payroll/trigger",
		"/ui/jobs/payroll/delete", "/ui/jobs/payroll/bogus", "/ui/jobs/other/pause"}
	ctx := context.Background()
	type state struct {
		exists, paused bool
		next           time.Time
	}
	now := func() state {
		j, err := s.sched.Job(ctx, "payroll")
		return state{err == nil, j.Paused, j.NextRunAt}
	}
	f.Fuzz(func(t *testing.T, target uint8, body, ctype string, withSession, withCSRF bool, origin string) {
		// A fresh session and its CSRF token, from another address.
		w := loginFrom(d, "10.9.9.9:1", testToken, nil)
		cookie := cookieOf(w.Header())
		req := httptest.NewRequest("GET", "/ui/jobs/payroll/confirm?action=pause", nil)
		req.AddCookie(&http.Cookie{Name: "sqlease_dashboard", Value: cookie})
		w = httptest.NewRecorder()
		d.ServeHTTP(w, req)
		m := csrfRe.FindStringSubmatch(w.Body.String())
		if cookie == "" || m == nil {
			body := w.Body.String()
			if i := strings.Index(body, "<main"); i >= 0 {
				body = body[i:]
			}
			t.Fatalf("no session (%q) or CSRF token: the confirmation answered %d: %.600s", cookie, w.Code, body)
		}
		if withCSRF {
			body += "&csrf=" + url.QueryEscape(m[1])
		}
		path := targets[int(target)%len(targets)]
		before := now()
		req = httptest.NewRequest("POST", path, strings.NewReader(body))
		req.RemoteAddr = "192.0.2.7:1"
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if origin != "" && !strings.ContainsAny(origin, "\r\n\x00") {
			req.Header.Set("Origin", origin)
		}
		if withSession {
			req.AddCookie(&http.Cookie{Name: "sqlease_dashboard", Value: cookie})
		}
		w = httptest.NewRecorder()
		d.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("POST %s %q: %d %s", path, body, w.Code, w.Body.String())
		}
		if after := now(); after != before {
			if !withSession || !withCSRF {
				t.Fatalf("POST %s %q without a session and its CSRF token changed the job: %+v -> %+v (%d)", path, body, before, after, w.Code)
			}
			if !after.exists {
				// Not s.job: its f.Helper may not be called inside the fuzz
				// target (a panic the fuzzer then reported as the next
				// input's missing job).
				if _, _, err := s.sched.Create(ctx, sqlease.Job{Name: "payroll", Schedule: sqlease.Schedule{Every: time.Hour}}); err != nil {
					t.Fatal(err)
				}
			} else if after.paused {
				if _, err := s.sched.Resume(ctx, "payroll"); err != nil {
					t.Fatal(err)
				}
			}
		}
		if path == "/ui/login" && cookieOf(w.Header()) != "" && !strings.Contains(body, testToken) && !strings.Contains(body, url.QueryEscape(testToken)) {
			t.Fatalf("a sign-in without the token: %q", body)
		}
	})
}
