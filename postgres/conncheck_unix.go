//go:build unix

package postgres

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// connIdleAndOpen reports whether an idle connection's socket is still open
// with nothing to read, by a non-blocking peek that consumes nothing (as
// go-sql-driver/mysql checks its connections). A server that restarted or a
// proxy that cut the connection has closed the socket (EOF) or sent a last
// message (a FATAL error, a TLS alert): either makes it false, and the
// caller pings. Unknown kinds of connection are false too.
func connIdleAndOpen(c net.Conn) bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn() // a TLS record waiting is bytes waiting
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	// Control, not Read: Read waits for the socket's read lock, which a
	// reader blocked on the socket holds until data arrives — and pgx
	// leaves one (its background reader, started by a write slower than
	// 15 ms) on an idle connection until the next reply. Waiting for it
	// hung the pool's next user for good (a node's release at shutdown).
	// A peek consumes nothing, so it takes nothing from that reader.
	open := false
	err = rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = n < 0 && (errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK))
	})
	return err == nil && open
}
