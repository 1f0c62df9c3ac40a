package postgres_test

import (
	"strings"
	"testing"

	"github.com/sqlease/sqlease/postgres"
)

// TestNodeSessionName: a holder's session name fits application_name (63
// bytes, printable ASCII), is the holder itself when it can be, and tells
// long holders with a common start apart.
func TestNodeSessionName(t *testing.T) {
	long := strings.Repeat("host-", 20)
	for _, h := range []string{"node-a", "web-7f9c-0123456789abcdefghij.internal:8080", long + "1", long + "2", "nöde-ü"} {
		n := postgres.NodeSessionName(h)
		if len(n) > 63 || !strings.HasPrefix(n, "sqlease-node ") {
			t.Errorf("%q → %q (%d bytes)", h, n, len(n))
		}
		for _, c := range []byte(n) {
			if c < 0x20 || c > 0x7e {
				t.Errorf("%q → %q: not printable ASCII", h, n)
			}
		}
	}
	if got := postgres.NodeSessionName("node-a"); got != "sqlease-node node-a" {
		t.Errorf("node-a → %q", got)
	}
	if postgres.NodeSessionName(long+"1") == postgres.NodeSessionName(long+"2") {
		t.Error("two long holders share a session name")
	}
}
