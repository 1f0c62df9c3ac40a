package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// session is what a request's cookie says.
type session struct {
	value    string    // the cookie's value, "" when none valid
	id       string    // its random id, what a sign-out revokes
	issued   time.Time // when it was signed
	signedIn bool      // signed in with the API token
}

const cookieName = "sqlease_dashboard"

// revocationMargin is added to a revoked session's remaining lifetime: the
// nodes' clocks decide a session's expiry, the database's that of its
// revocation, and sessionOf accepts a session issued up to a minute ahead.
const revocationMargin = 5 * time.Minute

// sessionOf reads and verifies the session cookie. A signed-in session
// is looked up among the revoked ones (one lookup by primary key); the
// error is that lookup's (the database is unreachable: the caller answers
// 503 rather than taking the user for signed out).
func (d *Dashboard) sessionOf(r *http.Request) (session, error) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, nil
	}
	parts := strings.Split(c.Value, ".")
	if len(parts) != 4 || (parts[0] != "a" && parts[0] != "t") || len(parts[2]) != 32 {
		return session{}, nil
	}
	issued, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || time.Since(time.Unix(issued, 0)) > SessionLifetime || time.Until(time.Unix(issued, 0)) > time.Minute {
		return session{}, nil
	}
	want := d.mac("session", strings.Join(parts[:3], "."))
	if subtle.ConstantTimeCompare([]byte(want), []byte(parts[3])) != 1 {
		return session{}, nil
	}
	s := session{value: c.Value, id: parts[2], issued: time.Unix(issued, 0), signedIn: parts[0] == "t" && d.cfg.APIToken != ""}
	if s.signedIn {
		revoked, err := d.revoked.check(r.Context(), s.id)
		if err != nil {
			return session{}, err
		}
		if revoked {
			return session{}, nil
		}
	}
	return s, nil
}

// newSession sets a fresh session cookie: kind "t" after a sign-in, "a"
// (anonymous) to bind CSRF tokens where no token is set.
func (d *Dashboard) newSession(w http.ResponseWriter, r *http.Request, kind string) session {
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	now := time.Now()
	id := hex.EncodeToString(nonce)
	body := kind + "." + strconv.FormatInt(now.Unix(), 10) + "." + id
	v := body + "." + d.mac("session", body)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: v, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: d.secure(r), MaxAge: int(SessionLifetime.Seconds())})
	return session{value: v, id: id, issued: time.Unix(now.Unix(), 0), signedIn: kind == "t"}
}

// clearSession deletes the session cookie in the browser.
func (d *Dashboard) clearSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: d.secure(r), MaxAge: -1})
}

// secure reports whether the session cookie is marked Secure: always with
// Config.SecureCookies, over TLS, and with Config.TrustForwardedProto when
// a proxy says the client's request came over https.
func (d *Dashboard) secure(r *http.Request) bool {
	if d.cfg.SecureCookies || r.TLS != nil {
		return true
	}
	if d.cfg.TrustForwardedProto {
		first, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
		return strings.EqualFold(strings.TrimSpace(first), "https")
	}
	return false
}

func (d *Dashboard) mac(purpose, s string) string {
	m := hmac.New(sha256.New, d.key)
	m.Write([]byte(purpose + "\x00" + s))
	return hex.EncodeToString(m.Sum(nil))
}

// csrf is the form token of a session.
func (d *Dashboard) csrf(s session) string {
	if s.value == "" {
		return ""
	}
	return d.mac("csrf", s.value)[:40]
}

// csrfOK reports whether a parsed form carries the session's CSRF token.
func (d *Dashboard) csrfOK(s session, r *http.Request) bool {
	want := d.csrf(s)
	return want != "" && subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(want)) == 1
}

// revoke records s as revoked for the rest of its lifetime, in the
// database (every node refuses it from the next request on) and in this
// node's memory, then prunes the revocations that have expired.
func (d *Dashboard) revoke(ctx context.Context, s session) error {
	left := time.Until(s.issued.Add(SessionLifetime)) + revocationMargin
	if err := d.cfg.Store.RevokeSession(ctx, s.id, left); err != nil {
		return fmt.Errorf("sign out: %w", err)
	}
	d.revoked.remember(s.id, time.Now().Add(left))
	if _, err := d.cfg.Store.PruneRevokedSessions(ctx); err != nil {
		d.log.Warn("dashboard_prune_revoked_failed", errAttr(err))
	}
	return nil
}

// maxRememberedRevocations bounds the revocations a node keeps in memory
// (an id and a time each); beyond it, the database alone answers.
const maxRememberedRevocations = 4096

// revocations answers whether a session is revoked: from memory for the
// sessions this node saw revoked, from the database otherwise.
type revocations struct {
	lookup func(ctx context.Context, id string) (bool, error)

	mu    sync.Mutex
	known map[string]time.Time // id → end of its revocation
}

func (v *revocations) check(ctx context.Context, id string) (bool, error) {
	v.mu.Lock()
	until, ok := v.known[id]
	v.mu.Unlock()
	if ok && time.Now().Before(until) {
		return true, nil
	}
	revoked, err := v.lookup(ctx, id)
	if err != nil {
		return false, fmt.Errorf("check the session: %w", err)
	}
	if revoked {
		v.remember(id, time.Now().Add(time.Minute))
	}
	return revoked, nil
}

func (v *revocations) remember(id string, until time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.known == nil {
		v.known = map[string]time.Time{}
	}
	if len(v.known) >= maxRememberedRevocations {
		now := time.Now()
		for k, t := range v.known {
			if now.After(t) {
				delete(v.known, k)
			}
		}
		if len(v.known) >= maxRememberedRevocations {
			return
		}
	}
	v.known[id] = until
}
