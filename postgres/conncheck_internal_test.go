//go:build unix

package postgres

import (
	"net"
	"testing"
	"time"
)

// TestConnCheckBesideBlockedReader: the idle-connection check answers while
// another goroutine is blocked reading the same socket, as pgx's background
// reader stays after a slow write until the next reply arrives. The check
// used to wait for that reader's lock: the pool's next user of the
// connection hung for good (seen as a node that never finished its release
// at shutdown). It also still tells an open, quiet connection from one with
// bytes waiting and from one the peer closed.
func TestConnCheckBesideBlockedReader(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer := <-accepted
	defer peer.Close()

	check := func(what string) bool {
		t.Helper()
		got := make(chan bool, 1)
		go func() { got <- connIdleAndOpen(c) }()
		select {
		case open := <-got:
			return open
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the check did not return within 5 s", what)
			return false
		}
	}
	if !check("quiet") {
		t.Fatal("an open connection with nothing to read was reported closed")
	}
	// A reader blocked on the socket, as pgx's background reader.
	read := make(chan []byte, 1)
	go func() {
		b := make([]byte, 16)
		n, _ := c.Read(b)
		read <- b[:n]
	}()
	time.Sleep(50 * time.Millisecond) // let it block in Read
	if !check("beside a blocked reader") {
		t.Fatal("an open, quiet connection with a blocked reader was reported closed")
	}
	if _, err := peer.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if b := <-read; string(b) != "x" {
		t.Fatalf("the blocked reader got %q, want the byte the check must not consume", b)
	}
	if _, err := peer.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if check("bytes waiting") {
		t.Fatal("a connection with a byte waiting was reported quiet")
	}
	b := make([]byte, 1)
	if _, err := c.Read(b); err != nil || b[0] != 'y' {
		t.Fatalf("the check consumed the waiting byte: %q %v", b, err)
	}
	peer.Close()
	time.Sleep(50 * time.Millisecond)
	if check("closed by the peer") {
		t.Fatal("a connection the peer closed was reported open")
	}
}
