package netguard

import (
	"net/http/httptest"
	"testing"
)

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.9.9.9:1": true, "localhost:80": true, "LocalHost:80": true,
		"[::1]:80": true, "[::ffff:127.0.0.1]:80": true, "[::1%lo]:80": true, "127.0.0.1": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:80": false, "10.1.2.3:80": false,
		"example.com:80": false, "": false, "not an address": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestCrossSite(t *testing.T) {
	for _, c := range []struct {
		site, origin string
		noneOK       bool
		want         string
	}{
		{"", "", false, ""}, // curl: neither header
		{"same-origin", "http://node:8080", false, ""},
		{"same-origin", "http://NODE:8080", false, ""},
		{"none", "", true, ""},
		{"none", "", false, "Sec-Fetch-Site: none"},
		{"same-site", "", true, "Sec-Fetch-Site: same-site"},
		{"cross-site", "http://node:8080", true, "Sec-Fetch-Site: cross-site"},
		{"", "http://evil:8080", false, "Origin: http://evil:8080"},
		{"same-origin", "http://node:9090", true, "Origin: http://node:9090"},
		{"", "null", true, "Origin: null"},
		{"", "http://[::1", true, "Origin: http://[::1"},
	} {
		r := httptest.NewRequest("POST", "http://node:8080/x", nil)
		if c.site != "" {
			r.Header.Set("Sec-Fetch-Site", c.site)
		}
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if got := CrossSite(r, c.noneOK); got != c.want {
			t.Errorf("CrossSite(site %q, origin %q, noneOK %v) = %q, want %q", c.site, c.origin, c.noneOK, got, c.want)
		}
	}
}
