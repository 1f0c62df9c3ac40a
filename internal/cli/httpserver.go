package cli

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits of the HTTP server: a slow or greedy client must not hold
// connections, memory or goroutines without bound, nor starve the node's
// lease renewals or its probes (issues 11 and 30). Requests in flight and
// the memory of request bodies are bounded by the API itself
// (httpapi.Config.MaxInFlight, BodyMemory), where probes are exempt.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 30 * time.Second // a whole request, body included
	writeTimeout      = 30 * time.Second
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 64 << 10
	// maxConnections is the size of the connection table. A new connection
	// that finds it full closes an idle one (a keep-alive connection is a
	// courtesy, not a claim); only when none is idle is it refused, beyond
	// a reserve of reserveConnections kept for whoever comes next (a probe).
	maxConnections     = 256
	reserveConnections = 64
)

// listen opens the API's listener. Its connections are bounded by the
// table the server's ConnState keeps (newHTTPServer), not by blocking
// Accept: a blocked Accept left probes in the kernel's queue behind 256
// idle keep-alive connections for a minute.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &connTable{Listener: ln, max: maxConnections, reserve: reserveConnections, conns: map[net.Conn]http.ConnState{}}, nil
}

// connTable is the listener's table of open connections and their states.
type connTable struct {
	net.Listener
	max, reserve int

	mu    sync.Mutex
	conns map[net.Conn]http.ConnState
}

// Accept makes room for each new connection: an idle one is closed when
// the table is full, and the new one refused only when the reserve is
// used up as well (every connection busy in a request, each bounded by
// the server's read timeouts).
func (t *connTable) Accept() (net.Conn, error) {
	for {
		c, err := t.Listener.Accept()
		if err != nil {
			return nil, err
		}
		t.mu.Lock()
		if len(t.conns) >= t.max {
			t.closeIdleLocked(len(t.conns) - t.max + 1)
		}
		full := len(t.conns) >= t.max+t.reserve
		if !full {
			t.conns[c] = http.StateNew
		}
		t.mu.Unlock()
		if full {
			c.Close()
			continue
		}
		return c, nil
	}
}

// closeIdleLocked closes up to n idle connections.
func (t *connTable) closeIdleLocked(n int) {
	for c, st := range t.conns {
		if n <= 0 {
			return
		}
		if st == http.StateIdle {
			c.Close()
			delete(t.conns, c)
			n--
		}
	}
}

// track is the server's ConnState hook. A connection that turns idle while
// the table is three quarters full is closed at once.
func (t *connTable) track(c net.Conn, st http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch st {
	case http.StateClosed, http.StateHijacked:
		delete(t.conns, c)
	default:
		if _, ok := t.conns[c]; !ok && st != http.StateNew {
			return // already evicted
		}
		t.conns[c] = st
		if st == http.StateIdle && len(t.conns) > t.max*3/4 {
			c.Close()
			delete(t.conns, c)
		}
	}
}

// open is how many connections the table holds.
func (t *connTable) open() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// newHTTPServer returns the API's server with its timeouts, tracking the
// connections of ln when it is listen's.
func newHTTPServer(log *slog.Logger, ln net.Listener, h http.Handler) *http.Server {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if t, ok := ln.(*connTable); ok {
		srv.ConnState = t.track
	}
	return srv
}
