package httpapi

import (
	"mime"
	"net"
	"net/http"
	"strings"

	"github.com/sqlease/sqlease/internal/netguard"
)

// The request guard (issue 11): every request must be addressed to a host
// name the node is reached by (DNS rebinding), and every mutating request
// must be same-origin JSON (cross-site "simple" requests, which browsers
// send without a CORS preflight, are refused).

// hostAllowed reports whether the request's Host names this node: a
// loopback name or address, the listen address's own IP, any IP literal
// when the node listens on a wildcard address (rebinding needs a name), or
// a name in Config.AllowedHosts ("*" allows any).
func (a *api) hostAllowed(r *http.Request) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "" {
		return false
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	if ip != nil && ip.IsLoopback() {
		return true
	}
	for _, h := range a.cfg.AllowedHosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if hh, _, err := net.SplitHostPort(h); err == nil {
			h = hh
		}
		if h == "*" || strings.Trim(h, "[]") == host {
			return true
		}
	}
	if ip != nil {
		lh, _, err := net.SplitHostPort(a.cfg.ListenAddr)
		if err == nil {
			lip := net.ParseIP(strings.Trim(lh, "[]"))
			if lh == "" || lip != nil && lip.IsUnspecified() || lip != nil && lip.Equal(ip) {
				return true
			}
		}
	}
	return false
}

// jsonBody reports whether a mutating request may proceed as to its
// content type: application/json (any parameters), or no body at all; a
// batch of jobs may also be application/x-ndjson.
func jsonBody(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return r.ContentLength == 0 && r.Header.Get("Transfer-Encoding") == ""
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/x-ndjson" && r.URL.Path == "/v1/jobs:batch" {
		return true // a batch may come as NDJSON (not a type a form can send either)
	}
	if err == nil && mt == "application/x-www-form-urlencoded" && strings.HasPrefix(r.URL.Path, "/ui/") {
		return true // the dashboard's forms: same-origin (netguard.CrossSite) and CSRF-checked there
	}
	return err == nil && mt == "application/json"
}

// guard answers a request the guard refuses and reports whether it did.
func (a *api) guard(w http.ResponseWriter, r *http.Request) bool {
	if !a.hostAllowed(r) {
		unread(w, r)
		writeProblem(w, http.StatusMisdirectedRequest,
			"Host: "+r.Host+" is not a name this node answers to (add it with --allowed-hosts when a proxy or DNS name reaches the node)")
		return true
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions {
		return false
	}
	if why := netguard.CrossSite(r, true); why != "" {
		unread(w, r)
		writeProblem(w, http.StatusForbidden, why+": cross-site requests may not change anything")
		return true
	}
	if !jsonBody(r) {
		unread(w, r)
		writeProblem(w, http.StatusUnsupportedMediaType, "Content-Type: must be application/json, got "+r.Header.Get("Content-Type"))
		return true
	}
	return false
}
