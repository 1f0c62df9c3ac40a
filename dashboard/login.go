package dashboard

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sqlease/sqlease/internal/netguard"
)

// Sign-in limits. Failed sign-ins are limited per client (its IP address;
// an IPv6 address by its /64): each client has a bucket of signInBurst
// attempts that refills at one per signInRefill. A wrong token, a
// malformed form or a body that is not sent within loginReadTimeout takes
// one; a correct token refills the bucket. A client whose bucket is empty
// is answered 429 with Retry-After before its body is read, whatever its
// token: were its guesses still checked, the answer (429 or signed in)
// would tell a right guess from a wrong one at full speed. Clients that
// never failed are never refused, so one client's guessing locks nobody
// else out. At most loginsInFlight sign-ins per client are read at once,
// so slow bodies cannot take the node's request slots.
const (
	signInBurst      = 5
	signInRefill     = time.Second
	loginsInFlight   = 2
	loginReadTimeout = 5 * time.Second
	maxLoginForm     = 4 << 10
	// maxClients bounds the clients the limiter tracks. A client's entry
	// goes once its bucket is full again and none of its sign-ins is in
	// flight; when all are taken (a flood from as many addresses), clients
	// without one share a single bucket.
	maxClients = 4096
)

type bucket struct {
	tokens   float64
	at       time.Time // when tokens was computed
	inFlight int
}

// refill brings the bucket to now and reports whether it is full.
func (b *bucket) refill(now time.Time) bool {
	b.tokens = math.Min(signInBurst, b.tokens+float64(now.Sub(b.at))/float64(signInRefill))
	b.at = now
	return b.tokens >= signInBurst
}

// limiter limits failed sign-ins per client.
type limiter struct {
	mu       sync.Mutex
	clients  map[string]*bucket
	overflow bucket // shared by the clients beyond maxClients
}

func newLimiter() *limiter {
	return &limiter{clients: map[string]*bucket{}, overflow: bucket{tokens: signInBurst}}
}

// clientKey is the client's address: the IP of RemoteAddr, an IPv6 one
// cut to its /64 (one host usually has the whole /64).
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// begin admits a sign-in of client, or returns how long it must wait.
func (l *limiter) begin(client string) (b *bucket, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	b = l.clients[client]
	if b == nil {
		if len(l.clients) >= maxClients {
			for k, c := range l.clients {
				if c.inFlight == 0 && c.refill(now) {
					delete(l.clients, k)
				}
			}
		}
		if len(l.clients) < maxClients {
			b = &bucket{tokens: signInBurst, at: now}
			l.clients[client] = b
		} else {
			b = &l.overflow
		}
	}
	b.refill(now)
	switch {
	case b.tokens < 1:
		return nil, time.Duration((1 - b.tokens) * float64(signInRefill))
	case b.inFlight >= loginsInFlight && b != &l.overflow, b.inFlight >= 4*loginsInFlight:
		return nil, time.Second
	}
	b.inFlight++
	return b, 0
}

// end closes a sign-in begun with begin: failed takes a token, a success
// fills the bucket.
func (l *limiter) end(b *bucket, failed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b.inFlight--
	b.refill(time.Now())
	if failed {
		b.tokens = math.Max(0, b.tokens-1)
	} else {
		b.tokens = signInBurst
	}
}

type loginData struct {
	Next, Error string
}

func (d *Dashboard) loginPage(w http.ResponseWriter, r *http.Request) {
	v := &view{Title: "Sign in", Node: d.node(), TokenSet: d.cfg.APIToken != "", Data: loginData{Next: safeNext(r.URL.Query().Get("next"))}}
	d.render(w, http.StatusOK, "login", "layout", v)
}

// login signs in with the API token. The per-client limit is applied
// before the body is read; the body is read with a limit of maxLoginForm
// bytes and a deadline of loginReadTimeout.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	if why := netguard.CrossSite(r, false); why != "" {
		d.refuse(w, r, http.StatusForbidden, why+": cross-site requests may not sign in")
		return
	}
	b, wait := d.limits.begin(clientKey(r))
	if b == nil {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(max(wait, time.Second).Seconds()))))
		d.refuse(w, r, http.StatusTooManyRequests, "too many failed sign-ins from your address: wait a few seconds")
		return
	}
	failed := true
	defer func() { d.limits.end(b, failed) }()
	if err := readForm(w, r, maxLoginForm); err != nil {
		d.refuse(w, r, formStatus(err), "form: "+err.Error())
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	got := sha256.Sum256([]byte(strings.TrimSpace(r.PostForm.Get("token"))))
	if d.cfg.APIToken == "" || subtle.ConstantTimeCompare(got[:], d.token[:]) != 1 {
		d.log.Warn("dashboard_sign_in_failed", slog.String("remote", r.RemoteAddr))
		v := &view{Title: "Sign in", Node: d.node(), TokenSet: d.cfg.APIToken != "", Data: loginData{Next: next, Error: "That is not the API token."}}
		d.render(w, http.StatusUnauthorized, "login", "layout", v)
		return
	}
	failed = false
	d.newSession(w, r, "t")
	sep := "?"
	if strings.Contains(next, "?") {
		sep = "&"
	}
	http.Redirect(w, r, next+sep+"done=login", http.StatusSeeOther)
}

// readForm parses a POST form of at most limit bytes, sent within
// loginReadTimeout (where the connection supports a read deadline).
func readForm(w http.ResponseWriter, r *http.Request, limit int64) error {
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(loginReadTimeout)); err == nil {
		defer rc.SetReadDeadline(time.Time{})
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	return r.ParseForm()
}

// formStatus is the status of a form that could not be read: 413 over the
// limit, 408 past the deadline, 400 otherwise.
func formStatus(err error) int {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		return http.StatusRequestTimeout
	}
	return http.StatusBadRequest
}

// logout signs out: the session is revoked in the database, so a copy of
// the cookie is refused by every node from then on, and the cookie is
// cleared. A signed-in session needs its CSRF token to sign out.
func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) {
	if why := netguard.CrossSite(r, false); why != "" {
		d.refuse(w, r, http.StatusForbidden, why)
		return
	}
	s, err := d.sessionOf(r)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	if err := readForm(w, r, 4096); err != nil {
		d.refuse(w, r, formStatus(err), "form: "+err.Error())
		return
	}
	if s.signedIn {
		if !d.csrfOK(s, r) {
			d.refuse(w, r, http.StatusForbidden, "the form's CSRF token is missing or stale: reload the page and sign out again")
			return
		}
		if err := d.revoke(r.Context(), s); err != nil {
			d.fail(w, r, err)
			return
		}
		d.log.Info("dashboard_signed_out")
	}
	d.clearSession(w, r)
	http.Redirect(w, r, "/ui/login?done=logout", http.StatusSeeOther)
}

// safeNext keeps a redirect target on this site: "/" or a path under
// "/ui/", with an optional query. Anything else (a scheme or host, "//"
// or a backslash anywhere, before or after percent-decoding, control
// characters, dot segments) becomes "/".
func safeNext(s string) string {
	if s == "/" || s == "" || len(s) > 2048 {
		return "/"
	}
	decoded := s
	for range 3 { // "%252F" decodes twice
		u, err := url.PathUnescape(decoded)
		if err != nil {
			return "/"
		}
		if u == decoded {
			break
		}
		decoded = u
	}
	for _, v := range []string{s, decoded} {
		if !strings.HasPrefix(v, "/ui/") && v != "/ui" && !strings.HasPrefix(v, "/?") {
			return "/"
		}
		if strings.Contains(v, "//") || strings.ContainsRune(v, '\\') || strings.Contains(v, "/../") || strings.Contains(v, "/./") ||
			strings.HasSuffix(v, "/..") || strings.HasSuffix(v, "/.") {
			return "/"
		}
		for _, c := range v {
			if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) || c == '\u2028' || c == '\u2029' {
				return "/"
			}
		}
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" || u.Fragment != "" {
		return "/"
	}
	return s
}
