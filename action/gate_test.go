package action

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/sqlease/sqlease"
)

// TestGateAtTheSocket: a request whose run may no longer act by the time
// the transport writes it is refused at the socket — the server sees
// nothing — even though the request's own context is live (as after a
// pause between the just-in-time check and the write); a later request on
// the same client, with a live run, is sent. Over HTTPS too, where the
// transport hands GotConn the TLS connection above the gated one (it was
// not armed there), and with the server offering HTTP/2, which would
// carry many runs' requests on one connection and one gate: the
// transport speaks HTTP/1.1.
func TestGateAtTheSocket(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[secure], func(t *testing.T) {
			var got atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Add(1) })
			tr := gatedTransport()
			var srv *httptest.Server
			if secure {
				srv = httptest.NewUnstartedServer(h)
				srv.EnableHTTP2 = true // offered, and to be declined
				srv.StartTLS()
				tr.TLSClientConfig = &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
			} else {
				srv = httptest.NewServer(h)
			}
			defer srv.Close()
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			send := func(run context.Context) error {
				req, err := http.NewRequestWithContext(withGate(context.Background(), run), "POST", srv.URL, nil)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := client.Do(req)
				if err == nil {
					resp.Body.Close()
					if resp.ProtoMajor != 1 {
						t.Errorf("%s: one gate per connection needs one request at a time on it", resp.Proto)
					}
				}
				return err
			}
			if err := send(context.Background()); err != nil || got.Load() != 1 {
				t.Fatalf("live run: %v, %d requests received", err, got.Load())
			}
			// The same (kept-alive) connection, now for a run whose gate closed.
			deposed, cancel := context.WithCancelCause(context.Background())
			cancel(sqlease.ErrNotLeader)
			err := send(deposed)
			if !errors.Is(err, errGateClosed) || !errors.Is(err, sqlease.ErrLeaseLost) {
				t.Fatalf("deposed run: want errGateClosed wrapping the gate's error, got %v", err)
			}
			if err := send(context.Background()); err != nil || got.Load() != 2 {
				t.Fatalf("after a refused request: %v, %d requests received, want 2 (the refused one never arrived)", err, got.Load())
			}
		})
	}
}
