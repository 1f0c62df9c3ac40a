package action

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/sqlease/sqlease/scheduler"
)

// The gate at the socket. The just-in-time check before an HTTP action
// (scheduler.Ensure) and the first byte on the wire are two steps apart: a
// process paused between them (SIGSTOP, a VM freeze, a long GC) would send
// after it woke, under a lease that expired meanwhile and beside the new
// leader. So every write of a request on a connection is checked again,
// synchronously, against the run's gate, and refused once it is closed:
// the window shrinks from a request's way through the transport to the
// instant between the check and the write system call.

// errGateClosed marks a request refused at the socket.
var errGateClosed = errors.New("the run's gate closed before the request was written")

// gatedConn checks its armed gate before every write.
type gatedConn struct {
	net.Conn
	gate atomic.Pointer[connGate]
}

// connGate is one request's gate: the run whose check (scheduler.Ensure)
// every write of its request passes, and the trace that arms it on the
// connection the request gets — one allocation for both.
type connGate struct {
	run   context.Context
	trace httptrace.ClientTrace
}

func (c *gatedConn) Write(p []byte) (int, error) {
	if g := c.gate.Load(); g != nil {
		if err := scheduler.Ensure(g.run); err != nil {
			// The transport closes a connection whose write failed.
			return 0, fmt.Errorf("%w: %w", errGateClosed, err)
		}
	}
	return c.Conn.Write(p)
}

// gatedTransport is a clone of the default transport whose connections
// are gated.
func gatedTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Many runs call the same few hosts at once (a webhook receiver):
	// keep their connections rather than the default two per host, or
	// every delivery past the second opens (and a TIME_WAIT closes) one.
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 512
	// No "Accept-Encoding: gzip" of the transport's own, and so no gzip
	// reader around a response it would decompress: a webhook's answer is
	// short, and the run's output is the body as sent. (A header the
	// action sets itself is sent as it is, as before: the transport never
	// decompressed what it did not ask for.)
	t.DisableCompression = true
	// Where actions may connect: DestinationPolicy, checked per address.
	t.Proxy = policedProxy
	// HTTP/1.1 only: a connection carries one request at a time, so that
	// the gate armed on it is that request's run's. Over HTTP/2 the
	// requests of many runs would share one connection and one gate.
	t.ForceAttemptHTTP2 = false
	t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	dial := policedDial(&net.Dialer{Timeout: dialTimeout, KeepAlive: keepAlive})
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &gatedConn{Conn: c}, nil
	}
	return t
}

// As http.DefaultTransport's dialer.
const (
	dialTimeout = 30 * time.Second
	keepAlive   = 30 * time.Second
)

// withGate arms the connection a request gets with the run's check.
func withGate(ctx, run context.Context) context.Context {
	g := &connGate{run: run}
	g.trace.GotConn = func(info httptrace.GotConnInfo) {
		conn := info.Conn
		if tc, ok := conn.(*tls.Conn); ok {
			conn = tc.NetConn() // HTTPS: the gate is beneath TLS
		}
		if c, ok := conn.(*gatedConn); ok {
			c.gate.Store(g)
		}
	}
	return httptrace.WithClientTrace(ctx, &g.trace)
}
