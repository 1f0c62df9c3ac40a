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
	open := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = n < 0 && (errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK))
		return true // never wait for the socket to become readable
	})
	return err == nil && open
}
