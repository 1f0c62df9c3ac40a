package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

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
	Restarts     int64                      `json:"restarts"`
}

// SingletonList is the body of GET /v1/singletons, ordered by name.
type SingletonList struct {
	Singletons []Singleton `json:"singletons"`
}

// Singletons is the daemon's singleton service behind /v1/singletons.
// Errors wrap sqlease.ErrInvalidConfig (400), ErrNoJob (404), ErrConflict
// (409) or ErrUnauthorized (401).
type Singletons interface {
	// Create stores a definition (the API's JSON); created is false when an
	// identical one exists (a clash with a different one is ErrConflict).
	Create(ctx context.Context, raw []byte) (s Singleton, created bool, err error)
	List(ctx context.Context) ([]Singleton, error)
	Get(ctx context.Context, name string) (Singleton, error)
	SetPaused(ctx context.Context, name string, paused bool) (Singleton, error)
	Delete(ctx context.Context, name string) error
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
			a.fail(w, r, badRequest("body: %v", err))
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
	a.handleFunc("GET /v1/singletons", func(w http.ResponseWriter, r *http.Request) {
		list, err := s.List(r.Context())
		if err != nil {
			a.failSingleton(w, r, err)
			return
		}
		if list == nil {
			list = []Singleton{}
		}
		a.writeJSON(w, r, http.StatusOK, SingletonList{Singletons: list})
	})
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
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return badRequest("body: %v", err)
		}
		return s.SaveState(r.Context(), r.PathValue("name"), epoch, secret, body)
	}))
	a.handleFunc("POST /v1/singletons/{name}/heartbeat", a.processCall(func(r *http.Request, epoch int64, secret string) error {
		return s.Heartbeat(r.Context(), r.PathValue("name"), epoch, secret)
	}))
}

// processCall reads Sqlease-Epoch and the bearer secret of a singleton
// process's call; success is 204.
func (a *api) processCall(fn func(r *http.Request, epoch int64, secret string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, a.cfg.MaxBodyBytes)
		epoch, err := strconv.ParseInt(r.Header.Get("Sqlease-Epoch"), 10, 64)
		if err != nil || epoch < 1 {
			a.fail(w, r, badRequest("Sqlease-Epoch: the epoch the process runs under (SQLEASE_EPOCH) is required"))
			return
		}
		const scheme = "bearer "
		h := r.Header.Get("Authorization")
		if len(h) < len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sqlease-singleton"`)
			writeProblem(w, http.StatusUnauthorized, "Authorization: Bearer $SQLEASE_SINGLETON_TOKEN is required")
			return
		}
		err = fn(r, epoch, strings.TrimSpace(h[len(scheme):]))
		if errors.Is(err, ErrUnauthorized) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sqlease-singleton"`)
			writeProblem(w, http.StatusUnauthorized, "Authorization: not this run's SQLEASE_SINGLETON_TOKEN")
			return
		}
		if err != nil {
			a.failSingleton(w, r, err)
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
