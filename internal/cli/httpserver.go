package cli

import (
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// Limits of the HTTP server: a slow or greedy client must not hold
// connections, memory or goroutines without bound, nor starve the node's
// lease renewals (issue 11).
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 30 * time.Second // a whole request, body included
	writeTimeout      = 30 * time.Second
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 64 << 10
	// maxConnections bounds the open connections; more wait in the
	// kernel's accept queue.
	maxConnections = 256
	// maxInFlight bounds the requests being handled at once; more are
	// answered 503 with Retry-After at once.
	maxInFlight = 64
)

// listen opens the API's listener, bounded to maxConnections.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(ln, maxConnections), nil
}

// newHTTPServer returns the API's server with its timeouts and a bound on
// requests in flight.
func newHTTPServer(log *slog.Logger, h http.Handler) *http.Server {
	slots := make(chan struct{}, maxInFlight)
	limited := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			h.ServeHTTP(w, r)
		default:
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"too many requests in flight; retry"}` + "\n"))
		}
	})
	return &http.Server{
		Handler:           limited,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}
