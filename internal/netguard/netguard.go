// Package netguard holds the two checks of a request's or a listener's
// place on the network that the HTTP API, the dashboard and the actions
// each made: whether a listen address is on loopback only, and whether a
// browser's mutating request comes from another site.
package netguard

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// Loopback reports whether a listen address (host:port, or a bare host) is
// on loopback only: localhost, 127.0.0.0/8, ::1 (an IPv4-mapped or zoned
// form included). An empty host (all interfaces) is not.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.Unmap().IsLoopback()
}

// CrossSite reports why a mutating request must be refused as cross-site,
// or "" when it is same-origin (or from a non-browser client, which sends
// neither Sec-Fetch-Site nor Origin). noneOK accepts Sec-Fetch-Site: none
// (a request the user made directly, not a page).
func CrossSite(r *http.Request, noneOK bool) string {
	switch site := r.Header.Get("Sec-Fetch-Site"); {
	case site == "", site == "same-origin", site == "none" && noneOK:
	default:
		return "Sec-Fetch-Site: " + site
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if o == "null" || err != nil || !strings.EqualFold(u.Host, r.Host) {
			return "Origin: " + o
		}
	}
	return ""
}
