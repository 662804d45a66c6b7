package nemesis

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestRelay: the relay under Link and LossyPath joins each accepted
// connection to its destination both ways; a destination that refuses
// refuses the connection; close ends the connections it carries (the
// client reads EOF) and every goroutine (goleak, TestMain) and is
// idempotent.
func TestRelay(t *testing.T) {
	echo := echoServer(t)
	r := newRelay()
	defer r.close()
	open := func(target string) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		r.serve(l, func() (net.Conn, error) { return net.DialTimeout("tcp", target, 2*time.Second) },
			func(dst, src net.Conn) { _, _ = io.Copy(dst, src) })
		return l.Addr().String()
	}
	dialRelay := func(addr string) *peerConn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return &peerConn{c, bufio.NewReader(c)}
	}
	c := dialRelay(open(echo))
	mustEcho(t, c, "through the relay")
	mustEcho(t, dialRelay(open(echo)), "a second listener")

	gone, err := net.Listen("tcp", "127.0.0.1:0") // a destination that is down
	if err != nil {
		t.Fatal(err)
	}
	down := gone.Addr().String()
	gone.Close()
	refused := dialRelay(open(down))
	_ = refused.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := refused.r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("a connection to a destination that is down: %v, want EOF (refused)", err)
	}

	r.close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("a connection after close: %v, want EOF", err)
	}
	r.close() // idempotent
}
