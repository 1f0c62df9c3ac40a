package httpapi

import (
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/sqlease/sqlease/action"
	"github.com/sqlease/sqlease/scheduler"
)

// Every route is registered with a Policy, declared in the one table below
// (routePolicies) and enforced in one place (api.ServeHTTP) before its
// handler runs: who may call it, whether it can lead to a command running,
// how large a body it reads, and whether it is a probe that must be answered
// even when the node is saturated. A route without a row in the table makes
// New panic, so a new surface cannot skip the rules (issue 30: singletons,
// the dashboard and the runs listing each re-implemented a rule, or not).

// Auth says who may call a route.
type Auth int

const (
	// AuthPublic: anyone who reaches the node (probes, metrics, the
	// OpenAPI document).
	AuthPublic Auth = iota
	// AuthToken: the API token, when one is set — reads too (actions may
	// hold secrets, and the fleet's layout is nobody else's business).
	AuthToken
	// AuthRunSecret: a running process, with its run's own secret
	// (SQLEASE_SINGLETON_TOKEN, a job action's SQLEASE_RUN_TOKEN). The handler checks it before it reads the
	// body, and answers every failure alike.
	AuthRunSecret
	// AuthDashboard: the dashboard's own sign-in (a session cookie bound
	// to the API token, CSRF-checked forms).
	AuthDashboard
)

func (a Auth) String() string {
	switch a {
	case AuthPublic:
		return "public"
	case AuthToken:
		return "token"
	case AuthRunSecret:
		return "run-secret"
	case AuthDashboard:
		return "dashboard"
	}
	return "unknown"
}

// Exec says whether a route can create something that runs a command.
type Exec int

const (
	// ExecNever: nothing the route does runs a command.
	ExecNever Exec = iota
	// ExecAlways: everything the route creates runs a command (a
	// singleton): refused before the body is read when Config.Exec
	// refuses commands.
	ExecAlways
	// ExecByBody: the body decides (a job's action): the handler asks
	// Config.Exec about each action before it writes anything.
	ExecByBody
)

// Policy is a route's rules.
type Policy struct {
	Auth Auth
	Exec Exec
	// Body is the largest request body the route reads, in bytes; 0: none
	// (a body is refused with 413).
	Body int64
	// BodyCost is how many bytes of memory a byte of body costs while the
	// route decodes it (its share of Config.BodyMemory); 0 counts 1.
	BodyCost int64
	// Listing: the answer is a listing, cut at a byte budget with "next".
	Listing bool
	// Probe: answered even when every request slot is taken.
	Probe bool
}

// Bounds of request handling (Config defaults).
const (
	// DefaultMaxInFlight is Config.MaxInFlight's default.
	DefaultMaxInFlight = 64
	// DefaultBodyMemory is Config.BodyMemory's default: one batch of
	// MaxBatchBytes at its decoding cost fits, or many small writes.
	DefaultBodyMemory = 256 << 20
	// formBodyBytes bounds the dashboard's form posts.
	formBodyBytes = 16 << 10
	// bodyWait is how long a request waits for body memory before it is
	// answered 503.
	bodyWait = 2 * time.Second
	// batchCost is what a byte of a batch body costs while it is decoded
	// and validated (measured: a 31 MiB batch peaked at ~10× its size).
	batchCost = 10
)

// routePolicies is the policy of every route New registers. A test over
// the router (TestRoutePolicies) drives each with a hostile request.
func routePolicies(maxBody int64) map[string]Policy {
	read := Policy{Auth: AuthToken}
	list := Policy{Auth: AuthToken, Listing: true}
	change := Policy{Auth: AuthToken, Body: maxBody}
	return map[string]Policy{
		"GET /healthz":         {Auth: AuthPublic, Probe: true},
		"GET /readyz":          {Auth: AuthPublic, Probe: true},
		"GET /metrics":         {Auth: AuthPublic},
		"GET /v1/openapi.json": {Auth: AuthPublic},

		"POST /v1/jobs":                {Auth: AuthToken, Exec: ExecByBody, Body: maxBody},
		"POST /v1/jobs:batch":          {Auth: AuthToken, Exec: ExecByBody, Body: MaxBatchBytes, BodyCost: batchCost},
		"POST /v1/jobs:pause":          change,
		"POST /v1/jobs:resume":         change,
		"GET /v1/jobs":                 list,
		"GET /v1/jobs/{name}":          read,
		"DELETE /v1/jobs/{name}":       change,
		"POST /v1/jobs/{name}/pause":   change,
		"POST /v1/jobs/{name}/resume":  change,
		"POST /v1/jobs/{name}/trigger": change,
		"GET /v1/jobs/{name}/runs":     list,
		// Called by a running action with its attempt's secret.
		"PUT /v1/jobs/{name}/checkpoint": {Auth: AuthRunSecret, Body: scheduler.MaxCheckpointBytes},
		"GET /v1/jobs/{name}/checkpoint": {Auth: AuthRunSecret},
		"GET /v1/leases":                 list,
		"GET /v1/leases/{name}/history":  list,

		"POST /v1/singletons":                  {Auth: AuthToken, Exec: ExecAlways, Body: MaxSingletonBytes},
		"GET /v1/singletons":                   list,
		"GET /v1/singletons/{name}":            read,
		"POST /v1/singletons/{name}/pause":     change,
		"POST /v1/singletons/{name}/resume":    change,
		"DELETE /v1/singletons/{name}":         change,
		"PUT /v1/singletons/{name}/state":      {Auth: AuthRunSecret, Body: action.MaxStateBytes},
		"POST /v1/singletons/{name}/heartbeat": {Auth: AuthRunSecret},

		"GET /{$}": {Auth: AuthDashboard},
		"/ui/":     {Auth: AuthDashboard, Body: formBodyBytes},
	}
}

// RouteInfo is one route of a handler New returned: its pattern and its
// policy.
type RouteInfo struct {
	Pattern string
	Policy  Policy
}

// RoutePolicies returns every route of a handler New returned with its
// policy, dashboard routes included, in registration order.
func RoutePolicies(h http.Handler) []RouteInfo {
	a, ok := h.(*api)
	if !ok {
		return nil
	}
	out := make([]RouteInfo, 0, len(a.all))
	for _, p := range a.all {
		out = append(out, RouteInfo{Pattern: p, Policy: a.policies[p]})
	}
	return out
}

// limits holds the node-wide bounds: request slots and body memory.
type limits struct {
	slots chan struct{}
	body  *semaphore.Weighted
	max   int64
}

func newLimits(inFlight int, bodyMemory int64) *limits {
	return &limits{slots: make(chan struct{}, inFlight), body: semaphore.NewWeighted(bodyMemory), max: bodyMemory}
}

// enforce applies p to r before its handler runs; it answers the request
// itself, and returns false, when a rule refuses it. release, when not nil,
// must be called once the handler is done.
func (a *api) enforce(w http.ResponseWriter, r *http.Request, p Policy) (release func(), ok bool) {
	var done []func()
	release = func() {
		for _, f := range done {
			f()
		}
	}
	// refuse answers a refused request: the slot (and any memory) is given
	// back first, the answer sent, then the unread body dropped.
	refuse := func(answer func()) (func(), bool) {
		release()
		unread(w, r)
		answer()
		dropBody(w, r)
		return nil, false
	}

	if !p.Probe {
		select {
		case a.limits.slots <- struct{}{}:
			done = append(done, func() { <-a.limits.slots })
		default:
			return refuse(func() {
				w.Header().Set("Retry-After", "1")
				writeProblem(w, http.StatusServiceUnavailable, "too many requests in flight; retry")
			})
		}
	}
	switch p.Auth {
	case AuthToken:
		if !a.authorized(r) {
			return refuse(func() {
				w.Header().Set("WWW-Authenticate", `Bearer realm="sqlease"`)
				writeProblem(w, http.StatusUnauthorized, "Authorization: a valid bearer token is required for this request")
			})
		}
	case AuthRunSecret:
		// The handler compares the secret; one without any is refused
		// here, before anything else is looked at.
		if _, ok := bearerCredential(r); !ok {
			return refuse(func() { refuseRunSecret(w, r) })
		}
	}
	if a.cfg.WriteCheck != nil && (p.Auth == AuthToken || p.Auth == AuthRunSecret) &&
		r.Method != http.MethodGet && r.Method != http.MethodHead {
		// A 2xx must survive a failover: not while replication is not
		// synchronous, when the node is told to require it.
		if err := a.cfg.WriteCheck(); err != nil {
			return refuse(func() {
				w.Header().Set("Retry-After", "5")
				writeProblem(w, http.StatusServiceUnavailable, "writes refused: "+err.Error())
			})
		}
	}
	if p.Exec == ExecAlways {
		if err := a.cfg.Exec.Check("command"); err != nil {
			return refuse(func() { a.fail(w, r, err) })
		}
	}
	// The body: refused when the route takes none or it is declared too
	// large, bounded while read, and counted against the node's memory for
	// bodies before any of it is read.
	if r.ContentLength > p.Body || p.Body == 0 && r.ContentLength < 0 && hasBody(r) {
		release()
		if r.ContentLength > 0 && r.ContentLength <= p.Body+drainOversize {
			// A little too large, most likely an honest client: read it
			// to its end, so that the client, still writing, hears the
			// 413 rather than a reset connection.
			_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, r.ContentLength))
		} else {
			unread(w, r)
		}
		a.fail(w, r, &http.MaxBytesError{Limit: p.Body})
		dropBody(w, r)
		return nil, false
	}
	if p.Body > 0 {
		n := r.ContentLength
		if n < 0 {
			n = p.Body
		}
		n *= max(p.BodyCost, 1)
		n = min(n, a.limits.max)
		if n > 0 {
			ctx, cancel := context.WithTimeout(r.Context(), bodyWait)
			err := a.limits.body.Acquire(ctx, n)
			cancel()
			if err != nil {
				return refuse(func() {
					w.Header().Set("Retry-After", "1")
					writeProblem(w, http.StatusServiceUnavailable, "too many request bodies being read; retry")
				})
			}
			done = append(done, func() { a.limits.body.Release(n) })
		}
		r.Body = http.MaxBytesReader(w, r.Body, p.Body)
	}
	return release, true
}

// hasBody reports whether a request without a Content-Length has a body
// (chunked).
func hasBody(r *http.Request) bool {
	return len(r.TransferEncoding) > 0 || strings.Contains(strings.ToLower(r.Header.Get("Transfer-Encoding")), "chunked")
}

// bearerCredential returns the credentials of an "Authorization: Bearer"
// header.
func bearerCredential(r *http.Request) (string, bool) {
	const scheme = "bearer "
	h := r.Header.Get("Authorization")
	if len(h) < len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return "", false
	}
	c := strings.TrimSpace(h[len(scheme):])
	return c, c != ""
}

// drainOversize is how far beyond its route's bound a declared body is
// still read (and discarded) before the 413: further, the connection is
// closed after the answer instead.
const drainOversize = 1 << 20

// unread, before the answer to a request refused without reading its body,
// says that the connection closes after it: the server then sends the
// answer at once instead of first reading what is left of the body (a
// slow client would hold it for as long as it trickles).
func unread(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 || hasBody(r) {
		w.Header().Set("Connection", "close")
	}
}

// dropBody, after that answer, flushes it — a client trickling its body
// gets it at once — then closes the body, which reads a small rest to its
// end or gives up on a large one (the server then closes the connection
// after a lingering pause): either way a client still writing hears the
// answer rather than a reset connection.
func dropBody(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength == 0 && !hasBody(r) {
		return
	}
	_ = http.NewResponseController(w).Flush()
	_ = r.Body.Close()
}

// refuseRunSecret is the one answer to a running process's call without
// its run's secret — whatever else is wrong (no such singleton or job, not
// running here, a stale epoch), so that nobody learns what runs where.
func refuseRunSecret(w http.ResponseWriter, r *http.Request) {
	unread(w, r)
	if strings.HasPrefix(r.URL.Path, "/v1/jobs/") {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sqlease-run"`)
		writeProblem(w, http.StatusUnauthorized, "Authorization: Bearer $SQLEASE_RUN_TOKEN of the action's own attempt is required")
		return
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="sqlease-singleton"`)
	writeProblem(w, http.StatusUnauthorized, "Authorization: Bearer $SQLEASE_SINGLETON_TOKEN of the process's own run is required")
}
