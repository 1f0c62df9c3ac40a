package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/action"
)

// Singleton is a daemon singleton as the API shows it (API.md
// "Singletons"). Times are RFC 3339 UTC, database time.
type Singleton struct {
	Name         string                     `json:"name"`
	Command      []string                   `json:"command"`
	Env          map[string]action.EnvValue `json:"env,omitempty"`
	Heartbeat    string                     `json:"heartbeat"`
	StopTimeout  string                     `json:"stop_timeout"`
	Status       string                     `json:"status"`
	Holder       string                     `json:"holder,omitempty"`
	Epoch        int64                      `json:"epoch"`
	State        json.RawMessage            `json:"state"`
	StateSavedAt string                     `json:"state_saved_at,omitempty"`
	HeartbeatAt  string                     `json:"heartbeat_at,omitempty"`
	StartedAt    string                     `json:"started_at,omitempty"`
	// Restarts counts the starts after the first (after the process
	// exited, a failover or a handover).
	Restarts int64 `json:"restarts"`
	// LastError says why the process last ended on its own — "exit status
	// N" or "killed by signal NAME" and the last line it wrote (redacted),
	// or why it could not start — at LastErrorAt; omitted while it never
	// did. Status is failing after 3 failed starts in a row (v2).
	LastError   string `json:"last_error,omitempty"`
	LastErrorAt string `json:"last_error_at,omitempty"`
}

// SingletonList is the body of GET /v1/singletons?limit=&after=, ordered
// by name. Next, when not empty, is the after parameter of the next page.
type SingletonList struct {
	Singletons []Singleton `json:"singletons"`
	Next       string      `json:"next,omitempty"`
}

// Singletons is the daemon's singleton service behind /v1/singletons.
// Errors wrap sqlease.ErrInvalidConfig (400), ErrNoJob (404), ErrConflict
// (409) or ErrUnauthorized (401).
type Singletons interface {
	// Create stores a definition (the API's JSON); created is false when an
	// identical one exists (a clash with a different one is ErrConflict).
	Create(ctx context.Context, raw []byte) (s Singleton, created bool, err error)
	// Page returns up to limit singletons whose names sort after
	// `after`, by name (a keyset page: GET /v1/singletons reads through
	// it in pieces within MaxPageBytes).
	Page(ctx context.Context, after string, limit int) ([]Singleton, error)
	Get(ctx context.Context, name string) (Singleton, error)
	SetPaused(ctx context.Context, name string, paused bool) (Singleton, error)
	Delete(ctx context.Context, name string) error
	// Authenticate checks a process call's secret (in constant time)
	// before anything else of the call is looked at, its body included:
	// ErrUnauthorized unless secret is that of the run of name on this
	// node — one error, whether name exists, runs here or not.
	Authenticate(name, secret string) error
	// SaveState and Heartbeat are called by the running process, with the
	// epoch it runs under and its per-run secret; a stale epoch is
	// ErrConflict and changes nothing.
	SaveState(ctx context.Context, name string, epoch int64, secret string, state []byte) error
	Heartbeat(ctx context.Context, name string, epoch int64, secret string) error
	// Stale names the singletons this node runs whose heartbeat is stale.
	Stale() []string
}

// ErrUnauthorized is a process call without its run's secret.
var ErrUnauthorized = errors.New("sqlease: unauthorized")

func (a *api) routeSingletons() {
	s := a.cfg.Singletons
	if s == nil {
		return
	}
	a.handleFunc("POST /v1/singletons", a.write(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			a.fail(w, r, bodyError(err))
			return
		}
		out, created, err := s.Create(r.Context(), body)
		if err != nil {
			a.failSingleton(w, r, err)
			return
		}
		status := http.StatusOK
		if created {
			status = http.StatusCreated
		}
		a.writeJSON(w, r, status, out)
	}))
	a.handleFunc("GET /v1/singletons", a.listSingletons)
	a.handleFunc("GET /v1/singletons/{name}", func(w http.ResponseWriter, r *http.Request) {
		out, err := s.Get(r.Context(), r.PathValue("name"))
		if err != nil {
			a.failSingleton(w, r, err)
			return
		}
		a.writeJSON(w, r, http.StatusOK, out)
	})
	for path, paused := range map[string]bool{"pause": true, "resume": false} {
		a.handleFunc("POST /v1/singletons/{name}/"+path, a.write(func(w http.ResponseWriter, r *http.Request) {
			out, err := s.SetPaused(r.Context(), r.PathValue("name"), paused)
			if err != nil {
				a.failSingleton(w, r, err)
				return
			}
			a.writeJSON(w, r, http.StatusOK, out)
		}))
	}
	a.handleFunc("DELETE /v1/singletons/{name}", a.write(func(w http.ResponseWriter, r *http.Request) {
		if err := s.Delete(r.Context(), r.PathValue("name")); err != nil {
			a.failSingleton(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	// The running process's calls carry its run's secret, not the API
	// token, and the epoch it runs under.
	a.handleFunc("PUT /v1/singletons/{name}/state", a.processCall(func(r *http.Request, epoch int64, secret string) error {
		r.Body = http.MaxBytesReader(nil, r.Body, action.MaxStateBytes)
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return bodyError(err)
		}
		// Refused here, not by the database (PostgreSQL: SQLSTATE 22021,
		// a 503): JSON decoding would let invalid UTF-8 through.
		if !utf8.Valid(body) || bytes.IndexByte(body, 0) >= 0 {
			return badRequest("state: must be a JSON value in UTF-8 without NUL characters")
		}
		return s.SaveState(r.Context(), r.PathValue("name"), epoch, secret, body)
	}))
	a.handleFunc("POST /v1/singletons/{name}/heartbeat", a.processCall(func(r *http.Request, epoch int64, secret string) error {
		return s.Heartbeat(r.Context(), r.PathValue("name"), epoch, secret)
	}))
}

// listSingletons is GET /v1/singletons?limit=&after=: by name, limit
// singletons or MaxPageBytes (env and state count: 40 singletons of about
// 1 MB once made a 38.8 MB list).
func (a *api) listSingletons(w http.ResponseWriter, r *http.Request) {
	p, read, ok := a.listPage(w, r)
	if !ok {
		return
	}
	out := SingletonList{Singletons: []Singleton{}}
	more, err := fill(p, func(n int) ([]Singleton, error) {
		list, err := a.cfg.Singletons.Page(r.Context(), read, n)
		if len(list) > 0 {
			read = list[len(list)-1].Name
		}
		return list, err
	}, func(s Singleton) bool {
		if !p.fit(s) {
			return false
		}
		out.Singletons, out.Next = append(out.Singletons, s), s.Name
		return true
	})
	a.writePage(w, r, &out, &out.Next, more, err, a.failSingleton)
}

// MaxSingletonBytes bounds the body of POST /v1/singletons (a larger one
// is 413): a definition's initial_state may have action.MaxStateBytes, and
// command and env the rest. Every listing page holds definitions; 40 of
// about 1 MB once made a 38.8 MB list.
const MaxSingletonBytes = 256 << 10

// bodyError is the error of a request body that could not be read: 413
// for one over its bound, else 400.
func bodyError(err error) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return err // fail: 413 "body: must be at most N bytes"
	}
	return badRequest("body: %v", err)
}

// processCall serves a singleton process's call (secretCall).
func (a *api) processCall(fn func(r *http.Request, epoch int64, secret string) error) http.HandlerFunc {
	return a.secretCall("process", a.cfg.Singletons.Authenticate, a.failSingleton, fn)
}

// secretCall serves a call from a job's running attempt or a singleton's
// process (who): its bearer secret is checked first, before the epoch and
// before the body is read (a slow body must not hold a request slot for a
// caller without credentials). Every failure of a caller without the run's
// secret is the same 401, so that nobody learns which jobs or singletons
// exist or run where; only the holder of the secret learns of a stale
// epoch (409). fn's errors go to fail, but ErrUnauthorized (the run ended
// since authenticate) is that 401 too. Success is 204.
func (a *api) secretCall(who string, authenticate func(name, secret string) error, fail func(http.ResponseWriter, *http.Request, error), fn func(r *http.Request, epoch int64, secret string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		secret, ok := bearerCredential(r)
		if !ok || authenticate(r.PathValue("name"), secret) != nil {
			refuseRunSecret(w, r)
			dropBody(w, r)
			return
		}
		epoch, err := strconv.ParseInt(r.Header.Get("Sqlease-Epoch"), 10, 64)
		if err != nil || epoch < 1 {
			a.fail(w, r, badRequest("Sqlease-Epoch: the epoch the %s runs under (SQLEASE_EPOCH) is required", who))
			return
		}
		err = fn(r, epoch, secret)
		if errors.Is(err, ErrUnauthorized) {
			refuseRunSecret(w, r)
			return
		}
		if err != nil {
			fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// failSingleton is fail with a detail that names the singleton.
func (a *api) failSingleton(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, sqlease.ErrNoJob) {
		err = &requestError{status: http.StatusNotFound, detail: "name: no singleton named " + strconv.Quote(r.PathValue("name"))}
	}
	a.fail(w, r, err)
}
