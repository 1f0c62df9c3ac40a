package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/action"
)

// ProblemContentType is the media type of every error response (RFC 9457).
const ProblemContentType = "application/problem+json"

// Problem is the body of every error response.
type Problem struct {
	// Type is "about:blank": the status code says what kind of error it is.
	Type string `json:"type"`
	// Title is the status code's text.
	Title string `json:"title"`
	// Status repeats the status code.
	Status int `json:"status"`
	// Detail explains this occurrence and names the offending field or
	// parameter.
	Detail string `json:"detail,omitempty"`
}

// requestError is an error the handler found in the request itself, with
// the status it calls for.
type requestError struct {
	status int
	detail string
}

func (e *requestError) Error() string { return e.detail }

// Unwrap makes a 400 match sqlease.ErrInvalidConfig.
func (e *requestError) Unwrap() error {
	if e.status == http.StatusBadRequest {
		return sqlease.ErrInvalidConfig
	}
	return nil
}

func badRequest(format string, args ...any) error {
	return &requestError{status: http.StatusBadRequest, detail: fmt.Sprintf(format, args...)}
}

// statusOf is the one table from errors to status codes.
func statusOf(err error) int {
	var re *requestError
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &re):
		return re.status
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, action.ErrExecRefused):
		return http.StatusForbidden
	case errors.Is(err, sqlease.ErrInvalidConfig), errors.Is(err, sqlease.ErrInvalidName):
		return http.StatusBadRequest
	case errors.Is(err, sqlease.ErrNoJob), errors.Is(err, sqlease.ErrNoLease):
		return http.StatusNotFound
	case errors.Is(err, sqlease.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, sqlease.ErrTransient), errors.Is(err, sqlease.ErrStorage), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// fail answers err as a problem. Server-side errors are logged and their
// text kept from the client.
func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	var detail string
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		detail = fmt.Sprintf("body: must be at most %d bytes", tooLarge.Limit)
	case status == http.StatusNotFound && errors.Is(err, sqlease.ErrNoJob) && r.PathValue("name") != "":
		detail = fmt.Sprintf("name: no job named %q", r.PathValue("name"))
	case status == http.StatusServiceUnavailable:
		detail = "database temporarily unavailable; retry"
		if errors.Is(err, sqlease.ErrStorage) && !errors.Is(err, sqlease.ErrTransient) {
			// Name the fault (a read-only file, a missing table, a
			// refused statement): retrying may not help.
			detail = "database error: " + strings.TrimSpace(strings.SplitN(cleanDetail(err), "\n", 2)[0])
			if len(detail) > 300 {
				detail = detail[:300] + "…"
			}
		}
		w.Header().Set("Retry-After", "1")
		a.log.Warn("http_unavailable", slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	case status >= 500:
		detail = "internal error"
		a.log.Error("http_error", slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	default:
		detail = cleanDetail(err)
	}
	writeProblem(w, status, detail)
}

// sentinelPrefixes are the texts of sqlease's sentinel errors as they
// appear inside wrapped messages; they add nothing to a detail.
var sentinelPrefixes = []string{
	sqlease.ErrInvalidConfig.Error() + ": ",
	sqlease.ErrInvalidName.Error() + ": ",
	sqlease.ErrConflict.Error() + ": ",
	action.ErrExecRefused.Error() + ": ",
}

// cleanDetail turns a (possibly joined) validation error into one line.
func cleanDetail(err error) string {
	msg := err.Error()
	for _, p := range sentinelPrefixes {
		msg = strings.ReplaceAll(msg, p, "")
	}
	return strings.Join(strings.Split(msg, "\n"), "; ")
}

// writeProblem writes a problem response.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	b, _ := json.Marshal(Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
	w.Header().Set("Content-Type", ProblemContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeJSON writes v as a JSON response with status.
func (a *api) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // URLs in actions stay readable
	if err := enc.Encode(v); err != nil {
		a.fail(w, r, fmt.Errorf("encode response: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// StatusOf is the HTTP status an error is answered with (statusOf), for
// tests and callers that decode jobs themselves.
func StatusOf(err error) int { return statusOf(err) }
