// Package httpapi is the HTTP interface of a sqlease node, as API.md
// describes it: the JSON job API under /v1, the lease listing, /healthz,
// /readyz and /metrics.
//
// # Routes
//
//	GET    /healthz                    200 "ok"; 503 if the node believes it leads but missed its renew deadline
//	GET    /readyz                     200 for leader and follower; 503 while stopping, starting or cut off from the database
//	GET    /metrics                    Config.Metrics
//	POST   /v1/jobs                    create (201; 200 for an idempotent repeat; 409 on a clash)
//	GET    /v1/jobs?limit=&after=      list, by name: {"jobs": […], "next": "…"}
//	GET    /v1/jobs/{name}             one job
//	DELETE /v1/jobs/{name}             delete (204)
//	POST   /v1/jobs/{name}/pause       pause, optional {"reason"} (200 with the job)
//	POST   /v1/jobs:pause · :resume    every job whose name starts with {"prefix"} (200 {"paused"|"resumed": N})
//	POST   /v1/jobs/{name}/resume      resume (200 with the job)
//	POST   /v1/jobs/{name}/trigger     run once now (200 with the job; 409 while paused or running)
//	GET    /v1/jobs/{name}/runs?limit= the run ledger, newest first: {"runs": […]}
//	GET    /v1/leases                  every lease: {"leases": […]}
//	GET    /v1/leases/{name}/history   leadership history, newest first: {"events": […], "next": "…"}
//	GET    /, /ui/…                    the web dashboard, when Config.Dashboard is set
//
// # Guarantees
//
// A 2xx answer to a write is sent only after the scheduler call returned,
// so the write is durable in the database. Every error is
// application/problem+json (RFC 9457) whose detail names the offending field
// or parameter; statusOf holds the one table from errors to status codes.
// Every route has a Policy (routePolicies, policy.go) that ServeHTTP
// enforces before the handler runs: with Config.APIToken set, every /v1
// route but the OpenAPI document and a running process's own calls requires
// "Authorization: Bearer TOKEN" (compared in constant time); routes that
// can create something that runs a command ask Config.Exec; bodies are
// bounded per route and node-wide; probes never wait for a request slot. A
// panicking handler answers 500 and is logged at Error; it never takes the
// process down.
package httpapi

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/action"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/scheduler"
)

// Defaults of Config.
const (
	// DefaultDBUnreachableAfter is how long the elector may go without a
	// successful database call before /readyz answers 503.
	DefaultDBUnreachableAfter = 10 * time.Second
	// DefaultMaxBodyBytes bounds a request body; a larger one is 413.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultListLimit is the page size of the job and run listings.
	DefaultListLimit = 100
	// MaxListLimit is the largest limit a listing accepts.
	MaxListLimit = 1000
)

// Config configures the handler. Scheduler and Elector are required; zero
// fields otherwise take the documented defaults.
type Config struct {
	// Scheduler stores the jobs (required).
	Scheduler *scheduler.Scheduler
	// Leases lists the leases for GET /v1/leases. Default: the elector's
	// store.
	Leases sqlease.LeaseStore
	// Elector is this node's elector, for /healthz and /readyz (required).
	Elector *election.Elector
	// Metrics serves GET /metrics (promhttp on the node's registry). Nil
	// leaves /metrics unrouted (404).
	Metrics http.Handler
	// APIToken, when not empty, is the bearer token POST and DELETE
	// requests must present.
	APIToken string
	// Stopping reports that the node is shutting down; /readyz then
	// answers 503 with mode=stopping. Nil means never.
	Stopping func() bool
	// DBUnreachableAfter is how long the elector may go without a
	// successful database call (or, before the first one, since New) before
	// /readyz answers 503. Default DefaultDBUnreachableAfter.
	DBUnreachableAfter time.Duration
	// MaxBodyBytes bounds request bodies. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Logger receives request errors (Error for 5xx and panics, Debug for
	// every request). Nil discards.
	Logger *slog.Logger

	// LeaderDispatch says that the leader runs the jobs (scheduler.Lead):
	// /readyz then says mode=leader only while the scheduler dispatches.
	LeaderDispatch bool
	// ListenAddr is the address the node listens on ("127.0.0.1:8080",
	// ":8080"): with a wildcard host any IP literal is a valid Host; a
	// specific IP is. Loopback names and addresses always are.
	ListenAddr string
	// AllowedHosts are the other host names (name or name:port) requests
	// may be addressed to, e.g. a DNS name behind a proxy; "*" allows any.
	// Others are answered 421 (DNS rebinding).
	AllowedHosts []string
	// Exec is the node's one policy on commands (action.NewExecPolicy):
	// routes that can create something that runs a command (Policy.Exec)
	// ask it before they write. The zero value refuses commands.
	Exec action.ExecPolicy
	// MaxInFlight bounds the requests handled at once; more are answered
	// 503 with Retry-After at once. Probes (/healthz, /readyz) never wait
	// for a slot. Default DefaultMaxInFlight.
	MaxInFlight int
	// BodyMemory bounds the request bodies being read at once, node-wide,
	// in bytes (a body counts its Content-Length, or its route's limit
	// when it has none, times its route's cost factor). A request that
	// finds no room within bodyWait is answered 503. Default
	// DefaultBodyMemory.
	BodyMemory int64
	// Singletons serves /v1/singletons, and /readyz answers 503 with
	// singleton_stale=<name> while one this node runs is stale. Nil leaves
	// the routes out.
	Singletons Singletons
	// Checkpoints serves PUT /v1/jobs/{name}/checkpoint for the job
	// actions this node runs. Nil leaves the route out.
	Checkpoints Checkpoints
	// Dashboard serves the web dashboard at "GET /" and under "/ui/" (its
	// forms are the one non-JSON body the guard lets through). Nil: none.
	Dashboard http.Handler
	// Durability, when set, is how durable the node's writes are: /readyz
	// adds it to its line (durability=… standbys=… sync_standbys=…).
	Durability func() sqlease.Durability
	// WriteCheck, when set, is asked before every API write (and by
	// /readyz): an error refuses the write with 503 and its text, and makes
	// /readyz answer 503 reason=replication_not_synchronous
	// (--require-synchronous-replication).
	WriteCheck func() error
}

// api is the handler New returns.
type api struct {
	cfg       Config
	log       *slog.Logger
	mux       *http.ServeMux
	patterns  []string // the API routes, for Routes and the OpenAPI document
	all       []string // every route, the dashboard's too
	policies  map[string]Policy
	limits    *limits
	clock     sqlease.Clock
	start     time.Time // local time of New, for readiness before the first contact
	tokenHash [sha256.Size]byte
}

// New returns the node's HTTP handler. It panics if cfg.Scheduler or
// cfg.Elector is nil (a wiring error).
func New(cfg Config) http.Handler {
	if cfg.Scheduler == nil {
		panic("httpapi: Config.Scheduler is required")
	}
	if cfg.Elector == nil {
		panic("httpapi: Config.Elector is required")
	}
	if cfg.Leases == nil {
		cfg.Leases = cfg.Elector.Config().Store
	}
	if cfg.Stopping == nil {
		cfg.Stopping = func() bool { return false }
	}
	if cfg.DBUnreachableAfter <= 0 {
		cfg.DBUnreachableAfter = DefaultDBUnreachableAfter
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.BodyMemory <= 0 {
		cfg.BodyMemory = DefaultBodyMemory
	}
	clock := cfg.Elector.Config().Clock
	a := &api{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), clock: clock, start: clock.Now(),
		policies: routePolicies(cfg.MaxBodyBytes), limits: newLimits(cfg.MaxInFlight, cfg.BodyMemory)}
	if cfg.APIToken != "" {
		a.tokenHash = sha256.Sum256([]byte(cfg.APIToken))
	}

	a.handleFunc("GET /healthz", a.healthz)
	a.handleFunc("GET /readyz", a.readyz)
	if cfg.Metrics != nil {
		a.handle("GET /metrics", cfg.Metrics)
	}
	a.handleFunc("POST /v1/jobs", a.write(a.createJob))
	a.handleFunc("POST /v1/jobs:batch", a.write(a.createJobs))
	a.handleFunc("POST /v1/jobs:pause", a.write(a.pausePrefix(true)))
	a.handleFunc("POST /v1/jobs:resume", a.write(a.pausePrefix(false)))
	a.handleFunc("GET /v1/jobs", a.listJobs)
	a.handleFunc("GET /v1/jobs/{name}", a.getJob)
	a.handleFunc("DELETE /v1/jobs/{name}", a.write(a.deleteJob))
	a.handleFunc("POST /v1/jobs/{name}/pause", a.write(a.pauseJob))
	a.handleFunc("POST /v1/jobs/{name}/resume", a.write(a.jobChange(cfg.Scheduler.Resume)))
	a.handleFunc("POST /v1/jobs/{name}/trigger", a.write(a.jobChange(cfg.Scheduler.Trigger)))
	a.handleFunc("GET /v1/jobs/{name}/runs", a.listRuns)
	a.handleFunc("GET /v1/leases", a.listLeases)
	a.handleFunc("GET /v1/leases/{name}/history", a.leaseHistory)
	a.routeSingletons()
	a.routeCheckpoints()
	if cfg.Dashboard != nil {
		// Not API routes: left out of Routes and the OpenAPI document.
		a.route("GET /{$}", cfg.Dashboard)
		a.route("/ui/", cfg.Dashboard)
	}
	a.handleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPI)
	})
	return a
}

// openAPI is the OpenAPI 3.1 description of this API, served at
// /v1/openapi.json; a test holds it and the routes to each other.
//
//go:embed openapi.json
var openAPI []byte

// handleFunc and handle register a route and remember its pattern.
func (a *api) handleFunc(pattern string, h http.HandlerFunc) { a.handle(pattern, h) }

func (a *api) handle(pattern string, h http.Handler) {
	a.patterns = append(a.patterns, pattern)
	a.route(pattern, h)
}

// route registers a route; it panics when the route has no policy in
// routePolicies (a wiring error every test finds).
func (a *api) route(pattern string, h http.Handler) {
	if _, ok := a.policies[pattern]; !ok {
		panic("httpapi: route " + pattern + " has no policy in routePolicies")
	}
	a.all = append(a.all, pattern)
	a.mux.Handle(pattern, h)
}

// Routes returns the route patterns ("METHOD /path") of a handler New
// returned, in registration order.
func Routes(h http.Handler) []string {
	if a, ok := h.(*api); ok {
		return append([]string(nil), a.patterns...)
	}
	return nil
}

// ServeHTTP recovers panics, answers unknown routes and methods with
// problems, and dispatches the rest.
func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	began := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			a.log.Error("http_panic", slog.String("method", r.Method), slog.String("path", r.URL.Path),
				slog.String("panic", fmt.Sprint(p)), slog.String("stack", string(debug.Stack())))
			if !sw.wrote {
				writeProblem(sw, http.StatusInternalServerError, "internal error")
			}
		}
		a.log.Debug("http_request", slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", sw.code()), slog.Duration("took", time.Since(began)))
	}()
	// Answers echo what callers sent (names, fields): never let a browser
	// sniff them into something else.
	sw.Header().Set("X-Content-Type-Options", "nosniff")
	if a.guard(sw, r) {
		dropBody(sw, r)
		return
	}
	_, pattern := a.mux.Handler(r)
	policy, ok := a.policies[pattern]
	if pattern == "" || !ok {
		a.unrouted(sw, r)
		return
	}
	release, ok := a.enforce(sw, r, policy)
	if !ok {
		return
	}
	defer release()
	a.mux.ServeHTTP(sw, r)
}

// unrouted answers a request no pattern matched: ServeMux decides between
// 404 and 405 (with Allow), and the answer becomes a problem.
func (a *api) unrouted(w http.ResponseWriter, r *http.Request) {
	h, _ := a.mux.Handler(r)
	capture := &captureWriter{header: http.Header{}}
	h.ServeHTTP(capture, r)
	switch code := capture.code; code {
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", capture.header.Get("Allow"))
		writeProblem(w, code, fmt.Sprintf("method %s is not allowed on %s", r.Method, r.URL.Path))
	case 0, http.StatusNotFound:
		writeProblem(w, http.StatusNotFound, fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	default: // a redirect to the canonical path, or anything else: pass on
		for k, v := range capture.header {
			w.Header()[k] = v
		}
		w.WriteHeader(code)
		_, _ = w.Write(capture.body.Bytes())
	}
}

// write marks a mutating handler. The token, the body bound and the exec
// policy are its route's Policy, enforced by ServeHTTP for every route.
func (a *api) write(h http.HandlerFunc) http.HandlerFunc { return h }

// authorized reports whether r carries the API token (or none is set). The
// hashes compare in constant time whatever the token lengths.
func (a *api) authorized(r *http.Request) bool {
	if a.cfg.APIToken == "" {
		return true
	}
	c, ok := bearerCredential(r)
	if !ok {
		return false
	}
	got := sha256.Sum256([]byte(c))
	return subtle.ConstantTimeCompare(got[:], a.tokenHash[:]) == 1
}

// statusWriter remembers whether and what the handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() int {
	if !w.wrote {
		return http.StatusOK
	}
	return w.status
}

// captureWriter records ServeMux's own answer to an unrouted request.
type captureWriter struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (c *captureWriter) Header() http.Header { return c.header }

func (c *captureWriter) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
}

func (c *captureWriter) Write(b []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	return c.body.Write(b)
}
