// Package dashboard is the web dashboard every sqlease node serves at "/":
// who leads under which epoch and for how long still, the nodes seen
// recently, the leadership history, the jobs with their run ledgers and
// the singletons. Plain server-rendered HTML (html/template, assets
// embedded): the read-only pages work without JavaScript (they reload
// every 10 s by themselves); with it, the page's main part is re-fetched
// every RefreshInterval without a reload.
//
// # Actions and their guard
//
// Pause, resume, trigger and delete go through a confirmation page and a
// POST form carrying a CSRF token bound to the session cookie (HMAC), from
// the same origin (Origin and Sec-Fetch-Site are checked; the cookie is
// HttpOnly, SameSite=Strict, and Secure over TLS or as Config.SecureCookies
// and Config.TrustForwardedProto say). With an API token set, every page
// needs a sign-in with that token, as the API's reads do; the session is
// signed with a key derived from the token, so every node of the fleet
// accepts it. Signing out revokes the session in the database
// (sqlstore.Store.RevokeSession): every node refuses that cookie from then
// on, a copy of it too. Failed sign-ins are limited per client address
// (see login.go), before the form is read. Without a token, actions are
// offered only while the node listens on loopback; beyond it the
// dashboard is read-only.
//
// # Secrets
//
// Actions, runs and singletons are shown as the API shows them: a job's
// action through httpapi.JobOut (action.Redact: the password of an HTTP
// action's URL, credential headers), a run through httpapi.RunOut, the
// singletons as Config.Singletons lists them (httpapi.Singleton values,
// redacted by the daemon's singleton host). The dashboard reads no raw
// definition of its own.
//
// # Cost
//
// Every query is one index range: jobs page by name (keyset, a filter
// reads at most maxScan rows per page), runs by (job, scheduled_for,
// attempt), history by id; nothing counts or scans a whole table, so a
// page costs the same with 100,000 jobs and a million runs. Every page
// also stops at Config.PageBudget bytes of rendered data (names, actions,
// schedules, outputs, errors, states, reasons, counted as escaped for
// HTML): a listing then offers its next page, a singleton's state is cut
// for display with its size shown, and a run's output that alone exceeds
// the budget is shown cut to its end.
package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/internal/netguard"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

//go:embed templates/*.html static/*
var assets embed.FS

// Defaults of Config.
const (
	DefaultRefreshInterval = 2 * time.Second
	// DefaultPageBudget is the default of Config.PageBudget: 1 MiB.
	DefaultPageBudget = 1 << 20
	// SessionLifetime is how long a sign-in lasts.
	SessionLifetime = 12 * time.Hour
)

// Singletons lists the daemon's singletons (the daemon's singleton host).
type Singletons interface {
	List(ctx context.Context) ([]httpapi.Singleton, error)
}

// SingletonControl is Singletons that can also pause, resume and delete
// (the daemon's singleton host, as the API does): when Config.Singletons
// is one, the singletons page offers those actions, with the job actions'
// confirmation, CSRF and token rules. Errors as httpapi.Singletons's.
type SingletonControl interface {
	Singletons
	Get(ctx context.Context, name string) (httpapi.Singleton, error)
	SetPaused(ctx context.Context, name string, paused bool) (httpapi.Singleton, error)
	Delete(ctx context.Context, name string) error
}

// Config configures the dashboard.
type Config struct {
	// Store is read for leases, history, runs (required).
	Store *sqlstore.Store
	// Scheduler reads jobs and performs the actions (required).
	Scheduler *scheduler.Scheduler
	// Elector is this node's elector (required).
	Elector *election.Elector
	// Singletons, when set, adds the singletons to the overview and the
	// page /ui/singletons. Its values are shown as they are: it must
	// redact them as the API does. A SingletonControl adds the page's
	// pause, resume and delete actions.
	Singletons Singletons
	// APIToken, when set, is what signs a user in.
	APIToken string
	// ListenAddr is the node's listen address: without an API token,
	// actions are offered only when it is loopback.
	ListenAddr string
	// RefreshInterval is how often a page re-fetches its main part.
	RefreshInterval time.Duration
	// PageBudget bounds the data one page renders, in bytes (default
	// DefaultPageBudget): a page that reaches it stops and links to the
	// next one.
	PageBudget int
	// SecureCookies marks the session cookie Secure on every response,
	// for a dashboard served over https behind a proxy that terminates
	// TLS. Without it the cookie is Secure when the request came over TLS
	// (or, with TrustForwardedProto, says it did).
	SecureCookies bool
	// TrustForwardedProto marks the session cookie Secure when the
	// request carries X-Forwarded-Proto: https. Set it only behind a proxy
	// that sets (or strips) that header.
	TrustForwardedProto bool
	// Durability, when set, is how durable the node's writes are: the
	// overview shows it as a badge (a 2xx survives a failover only with
	// synchronous replication).
	Durability func() sqlease.Durability
	// Readiness, when set, is this node's readiness as its /readyz
	// computes it (httpapi.Readiness): the overview shows it for this
	// node; other nodes' come from their status records
	// (history.RunPresence).
	Readiness func() (ready bool, line string)
	// Version is this node's version, shown with its readiness.
	Version string
	// Sessions, when set, reports which nodes have a session with the
	// database now (postgres.NodeSessions): a node whose status record
	// says it keeps one and has none is shown unreachable at once.
	Sessions func(ctx context.Context) (alive func(holder string) bool, err error)
	// Logger receives action logs and errors. Nil discards.
	Logger *slog.Logger
}

// Dashboard is the dashboard's http.Handler: mount it at "GET /{$}" and
// "/ui/".
type Dashboard struct {
	cfg   Config
	log   *slog.Logger
	key   []byte // signs sessions and CSRF tokens
	token [sha256.Size]byte
	mux   *http.ServeMux
	pages map[string]*template.Template

	limits  *limiter
	revoked revocations
	gone    goneMemo
	scan    failScan
}

// New returns the dashboard.
func New(cfg Config) (*Dashboard, error) {
	if cfg.Store == nil || cfg.Scheduler == nil || cfg.Elector == nil {
		return nil, fmt.Errorf("dashboard: %w: Store, Scheduler and Elector are required", sqlease.ErrInvalidConfig)
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = DefaultRefreshInterval
	}
	if cfg.PageBudget <= 0 {
		cfg.PageBudget = DefaultPageBudget
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Dashboard{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), pages: map[string]*template.Template{}, limits: newLimiter()}
	d.revoked.lookup = cfg.Store.SessionRevoked
	if cfg.APIToken != "" {
		// One key for the fleet: a session signed by one node is good on
		// every node that has the token.
		k := sha256.Sum256([]byte("sqlease-dashboard\x00" + cfg.APIToken))
		d.key = k[:]
		d.token = sha256.Sum256([]byte(cfg.APIToken))
	} else {
		d.key = make([]byte, 32)
		if _, err := rand.Read(d.key); err != nil {
			return nil, fmt.Errorf("dashboard: session key: %w", err)
		}
	}
	for _, p := range []string{"overview", "history", "jobs", "job", "confirm", "login", "error", "singletons", "singleton_confirm"} {
		t, err := template.New(p).Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: template %s: %w", p, err)
		}
		d.pages[p] = t
	}
	static, _ := fs.Sub(assets, "static")
	d.mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", cacheFor(time.Hour, http.FileServerFS(static))))
	d.mux.HandleFunc("GET /{$}", d.read(d.overview))
	d.mux.HandleFunc("GET /ui/history", d.read(d.history))
	d.mux.HandleFunc("GET /ui/jobs", d.read(d.jobs))
	d.mux.HandleFunc("GET /ui/jobs/{name}", d.read(d.job))
	d.mux.HandleFunc("GET /ui/jobs/{name}/confirm", d.read(d.confirm))
	d.mux.HandleFunc("GET /ui/singletons", d.read(d.singletons))
	d.mux.HandleFunc("POST /ui/jobs/{name}/{action}", d.act)
	d.mux.HandleFunc("GET /ui/singletons/{name}/confirm", d.read(d.confirmSingleton))
	d.mux.HandleFunc("POST /ui/singletons/{name}/{action}", d.actSingleton)
	d.mux.HandleFunc("GET /ui/login", d.loginPage)
	d.mux.HandleFunc("POST /ui/login", d.login)
	d.mux.HandleFunc("POST /ui/logout", d.logout)
	return d, nil
}

func cacheFor(d time.Duration, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age="+strconv.Itoa(int(d.Seconds())))
		h.ServeHTTP(w, r)
	})
}

// ServeHTTP implements http.Handler.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	d.mux.ServeHTTP(w, r)
}

// canRead: with a token, only after a sign-in (the API's reads need it
// too: actions may hold secrets).
func (d *Dashboard) canRead(s session) bool { return d.cfg.APIToken == "" || s.signedIn }

// canAct: signed in with the token; without one, only on loopback.
func (d *Dashboard) canAct(s session) bool {
	if d.cfg.APIToken != "" {
		return s.signedIn
	}
	return netguard.Loopback(d.cfg.ListenAddr)
}

// view is what every page template gets besides its own data.
type view struct {
	Title    string
	Nav      string
	Node     nodeInfo
	CanAct   bool
	SignedIn bool
	TokenSet bool
	CSRF     string
	Refresh  int // milliseconds; 0: no live refresh
	Flash    string
	Data     any
}

type nodeInfo struct {
	Holder string
	Role   string
}

// read wraps a read-only page: sign-in when a token is set, an anonymous
// session otherwise (for the CSRF token of its forms), and the fragment
// mode of the live refresh (?fragment=1 renders only the main part).
func (d *Dashboard) read(page func(r *http.Request, v *view) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := d.sessionOf(r)
		if err != nil {
			d.fail(w, r, err)
			return
		}
		if !d.canRead(s) {
			http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if s.value == "" {
			s = d.newSession(w, r, "a")
		}
		v := &view{Node: d.node(), CanAct: d.canAct(s), SignedIn: s.signedIn, TokenSet: d.cfg.APIToken != "",
			CSRF: d.csrf(s), Refresh: int(d.cfg.RefreshInterval.Milliseconds()), Flash: flash(r.URL.Query().Get("done"))}
		name, err := page(r, v)
		if err != nil {
			d.fail(w, r, err)
			return
		}
		if r.URL.Query().Get("fragment") == "1" {
			d.render(w, http.StatusOK, name, "main", v)
			return
		}
		d.render(w, http.StatusOK, name, "layout", v)
	}
}

func (d *Dashboard) node() nodeInfo {
	role := "follower"
	if d.cfg.Elector.IsLeader() {
		role = "leader"
	}
	return nodeInfo{Holder: d.cfg.Elector.HolderID(), Role: role}
}

func (d *Dashboard) render(w http.ResponseWriter, status int, page, tmpl string, v *view) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	var b strings.Builder
	if err := d.pages[page].ExecuteTemplate(&b, tmpl, v); err != nil {
		d.log.Error("dashboard_render_failed", slog.String("page", page), slog.String("error", err.Error()))
		http.Error(w, "render failed", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// fail answers an error page: 404 for a missing job, 400 for a bad
// parameter, 503 for a database fault.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, sqlease.ErrNoJob):
		status = http.StatusNotFound
	case errors.Is(err, errForbidden):
		status = http.StatusForbidden
	case errors.Is(err, sqlease.ErrInvalidName), errors.Is(err, sqlease.ErrInvalidConfig), errors.Is(err, errBadParam):
		status = http.StatusBadRequest
	case errors.Is(err, sqlease.ErrStorage), errors.Is(err, sqlease.ErrTransient), errors.Is(err, context.DeadlineExceeded):
		status = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	}
	if status >= 500 {
		d.log.Warn("dashboard_failed", slog.String("path", r.URL.Path), errAttr(err))
	}
	d.render(w, status, "error", "layout", &view{Title: http.StatusText(status), Node: d.node(),
		Data: struct {
			Status int
			Detail string
		}{status, err.Error()}})
}

var errBadParam = errors.New("bad parameter")

func errAttr(err error) slog.Attr { return slog.String("error", err.Error()) }

func flash(done string) string {
	switch done {
	case "pause":
		return "Paused."
	case "resume":
		return "Resumed."
	case "trigger":
		return "Triggered: it runs once now."
	case "delete":
		return "Deleted."
	case "login":
		return "Signed in."
	case "logout":
		return "Signed out."
	}
	return ""
}
