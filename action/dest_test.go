package action

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/sqlease/sqlease"
)

func setPolicy(t *testing.T, listen string, allow ...string) {
	t.Helper()
	p, err := NewDestinationPolicy(listen, allow)
	if err != nil {
		t.Fatal(err)
	}
	SetDestinationPolicy(p)
	t.Cleanup(func() { destPolicy.Store(nil); httpTransport.CloseIdleConnections() })
}

// Issue 30 item 11: an HTTP action fetched the node's loopback services
// and the cloud's metadata address, and showed the answer in its run. A
// node that listens beyond loopback now refuses them: before sending where
// the URL names the address, and when dialling where a name resolves to
// one (a DNS rebinding).
func TestDestinationPolicyRefusesInternalAddresses(t *testing.T) {
	srv, seen := recordingServer(t, 200, "internal secrets")
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	setPolicy(t, "0.0.0.0:8080")
	for _, u := range []string{srv.URL + "/", "http://localhost:" + port + "/", "http://[::ffff:127.0.0.1]:" + port + "/",
		"http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/", "http://0.0.0.0:" + port + "/"} {
		s, err := Parse([]byte(`{"http":{"url":"` + u + `"}}`))
		if err != nil {
			t.Fatal(err)
		}
		err = s.Run(context.Background(), testRun(t))
		var de *DestinationError
		if !errors.As(err, &de) || !strings.HasPrefix(err.Error(), "http action not sent: destination ") ||
			!strings.HasSuffix(err.Error(), " is refused by this node's destination policy (--http-action-allow)") {
			t.Errorf("%s: %v", u, err)
		}
		// Refused at creation too, naming the field.
		if err := ValidateJSON([]byte(`{"http":{"url":"` + u + `"}}`)); u != "http://localhost:"+port+"/" && (!errors.Is(err, sqlease.ErrInvalidConfig) || !strings.Contains(err.Error(), "action.http.url")) {
			t.Errorf("ValidateJSON(%s) = %v", u, err)
		}
	}
	if n := len(seen()); n != 0 {
		t.Fatalf("%d requests reached the internal server", n)
	}
	// At the dial: a name that resolves to loopback (here localhost,
	// through the system's resolver) is refused on its address.
	_, err := policedDial(&net.Dialer{})(context.Background(), "tcp", "localhost:"+port)
	var de *DestinationError
	if !errors.As(err, &de) || !strings.Contains(de.Addr, ":"+port) {
		t.Fatalf("dial localhost: %v", err)
	}
	// The allow list overrides.
	setPolicy(t, "0.0.0.0:8080", "127.0.0.0/8")
	if err := (Spec{HTTP: &HTTP{URL: srv.URL + "/"}}).Run(context.Background(), testRun(t)); err != nil {
		t.Fatalf("allowed by prefix: %v", err)
	}
	setPolicy(t, "0.0.0.0:8080", "localhost")
	if err := (Spec{HTTP: &HTTP{URL: "http://localhost:" + port + "/"}}).Run(context.Background(), testRun(t)); err != nil {
		t.Fatalf("allowed by name: %v", err)
	}
	// A loopback node allows everything (a local quick start).
	setPolicy(t, "127.0.0.1:8080")
	if err := (Spec{HTTP: &HTTP{URL: srv.URL + "/"}}).Run(context.Background(), testRun(t)); err != nil {
		t.Fatalf("loopback node: %v", err)
	}
	if n := len(seen()); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
}

func TestDestinationPolicyDecides(t *testing.T) {
	p, err := NewDestinationPolicy("[::]:8080", []string{"10.0.0.0/8", "169.254.170.2", " hooks.internal "})
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]bool{
		"127.0.0.1": false, "127.9.9.9": false, "::1": false, "169.254.169.254": false, "fe80::1": false, "fd00:ec2::254": false,
		"100.100.100.200": false, "0.0.0.0": false, "::": false, "::ffff:169.254.169.254": false, "64:ff9b::a9fe:a9fe": false,
		"169.254.170.2": true, "10.1.2.3": true, "192.168.1.1": true, "8.8.8.8": true, "2001:db8::1": true, "64:ff9b::808:808": true,
	} {
		if got := p.Allows(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Allows(%s) = %v, want %v", addr, got, want)
		}
	}
	if !p.allowsHost("Hooks.Internal.") {
		t.Error("host name not allowed")
	}
	for _, bad := range []string{"10.0.0.0/33", "not a host", "-x.example"} {
		if _, err := NewDestinationPolicy("0.0.0.0:1", []string{bad}); err == nil || !strings.Contains(err.Error(), "--http-action-allow") {
			t.Errorf("allow entry %q: %v", bad, err)
		}
	}
	for listen, deny := range map[string]bool{"127.0.0.1:1": false, "localhost:1": false, "[::1]:1": false, "0.0.0.0:1": true, ":8080": true, "10.0.0.5:80": true} {
		if p, _ := NewDestinationPolicy(listen, nil); p.DenyLoopbackAndLinkLocal != deny {
			t.Errorf("listening on %s: deny %v, want %v", listen, p.DenyLoopbackAndLinkLocal, deny)
		}
	}
}
