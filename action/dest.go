package action

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/sqlease/sqlease/internal/netguard"
)

// Where HTTP actions may connect. Whoever may create jobs chooses an HTTP
// action's URL, and the response comes back through the runs API: without
// a policy a node fetches its own loopback services and the cloud's
// metadata endpoint (169.254.169.254: instance credentials) for anyone who
// can reach its API. The policy is enforced when a connection is dialled,
// on the address it resolved to, so a name that resolves (or rebinds) to
// 127.0.0.1 is refused too; redirects are never followed.

// DestinationPolicy decides which addresses HTTP actions may connect to.
// The zero policy allows every address.
type DestinationPolicy struct {
	// DenyLoopbackAndLinkLocal refuses loopback (127.0.0.0/8, ::1),
	// unspecified (0.0.0.0, ::, which reach the node itself), link-local
	// (169.254.0.0/16 with the metadata address 169.254.169.254,
	// fe80::/10) and other cloud metadata addresses (fd00:ec2::254,
	// 100.100.100.200), also written as IPv4-mapped or NAT64 IPv6.
	DenyLoopbackAndLinkLocal bool
	// Allow are addresses allowed even where refused above.
	Allow []netip.Prefix
	// AllowHosts are host names (exact, any case) allowed whatever they
	// resolve to.
	AllowHosts []string
}

// DestinationFlag is the daemon setting that lists the allowed exceptions;
// errors name it.
const DestinationFlag = "--http-action-allow"

// NewDestinationPolicy returns the daemon's policy for a node listening on
// listenAddr (host:port): a node that listens only on loopback allows every
// destination (a local quick start calls local services); one that listens
// beyond it refuses loopback and link-local ones
// (DenyLoopbackAndLinkLocal). allow lists the exceptions
// (--http-action-allow): CIDR prefixes ("10.1.0.0/16", "fd00::/8"),
// addresses ("127.0.0.1") or host names ("hooks.internal"). An entry that
// is none of them is an error naming it.
func NewDestinationPolicy(listenAddr string, allow []string) (DestinationPolicy, error) {
	p := DestinationPolicy{DenyLoopbackAndLinkLocal: !netguard.Loopback(listenAddr)}
	for _, a := range allow {
		a = strings.TrimSpace(a)
		switch {
		case a == "":
		case strings.Contains(a, "/"):
			pre, err := netip.ParsePrefix(a)
			if err != nil {
				return DestinationPolicy{}, fmt.Errorf("%s: %q is not a CIDR prefix such as 10.0.0.0/8", DestinationFlag, a)
			}
			p.Allow = append(p.Allow, pre.Masked())
		default:
			if ip, err := netip.ParseAddr(strings.Trim(a, "[]")); err == nil {
				p.Allow = append(p.Allow, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			} else if validHostName(a) {
				p.AllowHosts = append(p.AllowHosts, strings.ToLower(strings.TrimSuffix(a, ".")))
			} else {
				return DestinationPolicy{}, fmt.Errorf("%s: %q is not a CIDR prefix, an address or a host name", DestinationFlag, a)
			}
		}
	}
	return p, nil
}

// SetDestinationPolicy makes p the policy of every HTTP action the
// process sends from now on. The daemon calls it once at start; until then
// (and in a library) every destination is allowed.
func SetDestinationPolicy(p DestinationPolicy) {
	destPolicy.Store(&p)
}

var destPolicy atomic.Pointer[DestinationPolicy]

// DestinationError is the error of an HTTP action refused by the policy;
// the run's error reads "http action not sent: destination … is refused
// by this node's destination policy (--http-action-allow)".
type DestinationError struct {
	// Addr is the refused address (ip:port, or the URL's host).
	Addr string
}

// Error names the address and the setting that would allow it.
func (e *DestinationError) Error() string {
	return fmt.Sprintf("destination %s is refused by this node's destination policy (%s)", e.Addr, DestinationFlag)
}

// Allows reports whether the policy lets an HTTP action connect to ip.
// It is the one place that decides.
func (p DestinationPolicy) Allows(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, a := range p.Allow {
		if a.Contains(ip) {
			return true
		}
	}
	if !p.DenyLoopbackAndLinkLocal {
		return true
	}
	if internalAddr(ip) {
		return false
	}
	// NAT64 (64:ff9b::/96) carries an IPv4 address in its last 32 bits.
	if ip.Is6() && nat64.Contains(ip) {
		b := ip.As16()
		v4 := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		return !internalAddr(v4)
	}
	return true
}

var (
	nat64    = netip.MustParsePrefix("64:ff9b::/96")
	metadata = []netip.Addr{netip.MustParseAddr("fd00:ec2::254"), netip.MustParseAddr("100.100.100.200")}
)

func internalAddr(ip netip.Addr) bool {
	if ip.IsLoopback() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() {
		return true
	}
	for _, m := range metadata {
		if ip == m {
			return true
		}
	}
	return false
}

// allowsHost reports whether host is allowed by name.
func (p DestinationPolicy) allowsHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	for _, a := range p.AllowHosts {
		if h == a {
			return true
		}
	}
	return false
}

// CheckURL refuses, before anything is sent, a URL whose host is an
// address the policy refuses or "localhost" (names that resolve elsewhere
// are checked when dialled). It names the host.
func (p DestinationPolicy) CheckURL(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil // Parse's to refuse
	}
	return p.checkURL(u)
}

// checkURL is CheckURL of a parsed URL.
func (p DestinationPolicy) checkURL(u *url.URL) error {
	host := u.Hostname()
	if p.allowsHost(host) {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if !p.Allows(ip) {
			return &DestinationError{Addr: u.Host}
		}
		return nil
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if p.DenyLoopbackAndLinkLocal && (h == "localhost" || strings.HasSuffix(h, ".localhost")) && !p.Allows(netip.MustParseAddr("127.0.0.1")) {
		return &DestinationError{Addr: u.Host}
	}
	return nil
}

// checkURL is CheckURL under the process's policy.
func checkURL(rawURL string) error {
	if p := destPolicy.Load(); p != nil {
		return p.CheckURL(rawURL)
	}
	return nil
}

// checkRequestURL is checkURL of a request's URL, parsed already.
func checkRequestURL(u *url.URL) error {
	if p := destPolicy.Load(); p != nil {
		return p.checkURL(u)
	}
	return nil
}

// policedDial dials addr, checking the address each attempt connects to
// against the policy (net.Dialer.ControlContext runs after resolution,
// before connect). The proxy of the node's environment is exempt: it is
// the operator's; the URL's host is checked before it goes there
// (policedProxy).
func policedDial(dial *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	checked := *dial
	checked.ControlContext = func(_ context.Context, _, address string, _ syscall.RawConn) error {
		p := destPolicy.Load()
		if p == nil {
			return nil
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &DestinationError{Addr: address}
		}
		if !p.Allows(ap.Addr()) {
			return &DestinationError{Addr: address}
		}
		return nil
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		p := destPolicy.Load()
		if p == nil || proxyAddrs()[addr] {
			return dial.DialContext(ctx, network, addr)
		}
		if host, _, err := net.SplitHostPort(addr); err == nil && p.allowsHost(host) {
			return dial.DialContext(ctx, network, addr)
		}
		return checked.DialContext(ctx, network, addr)
	}
}

// policedProxy is http.ProxyFromEnvironment that checks the URL's host
// (CheckURL) when the request goes through a proxy, which resolves it.
func policedProxy(req *http.Request) (*url.URL, error) {
	u, err := http.ProxyFromEnvironment(req)
	if err == nil && u != nil {
		if err := checkURL(req.URL.String()); err != nil {
			return nil, err
		}
	}
	return u, err
}

// proxyAddrs are the host:port addresses of the environment's proxies,
// read once as net/http reads them.
var proxyAddrs = sync.OnceValue(func() map[string]bool {
	out := map[string]bool{}
	for _, scheme := range []string{"http", "https"} {
		req := &http.Request{URL: &url.URL{Scheme: scheme, Host: "sqlease-proxy-probe.example"}}
		u, err := http.ProxyFromEnvironment(req)
		if err != nil || u == nil {
			continue
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443", "socks5": "1080", "socks5h": "1080"}[u.Scheme]
		}
		out[net.JoinHostPort(u.Hostname(), port)] = true
	}
	return out
})

func validHostName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}
