package nemesis

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// The refusing address refuses a dial, and keeps its port from a
// listener while open.
func TestRefusingRefuses(t *testing.T) {
	r, err := NewRefusing()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	addr := r.Addr()
	if addr == "" {
		t.Fatal("no address")
	}
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		c.Close()
		t.Fatalf("dial %s succeeded", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatalf("another listener took %s", addr)
	}
}
