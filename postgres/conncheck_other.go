//go:build !unix

package postgres

import "net"

// connIdleAndOpen cannot look at the socket here: the caller pings.
func connIdleAndOpen(net.Conn) bool { return false }
