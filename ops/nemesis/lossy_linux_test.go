package nemesis

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestLossyPath (root): a connection over the path reaches its target
// through podflow's namespaces; at 20% loss a megabyte still arrives
// whole and in order while the nftables rules count dropped packets (real
// loss, which TCP retransmits); at 100% nothing arrives until the loss is
// lifted; Close removes the namespaces.
func TestLossyPath(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, nftables)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p, err := NewLossyPath([]string{l.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			p.Close()
		}
	}()
	c, err := p.Dial(l.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := p.SetLoss(20); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 1<<20)
	rand.Read(want)
	werr := make(chan error, 1)
	go func() { _, err := c.Write(want); werr <- err }()
	got := make([]byte, len(want))
	srv.SetReadDeadline(time.Now().Add(2 * time.Minute))
	if _, err := io.ReadFull(srv, got); err != nil {
		t.Fatal(err)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the bytes differ")
	}
	if n, err := p.Drops(); err != nil || n == 0 {
		t.Fatalf("dropped %d packets (%v) at 20%% loss", n, err)
	} else {
		t.Logf("dropped %d packets carrying 1 MiB at 20%% loss", n)
	}

	if err := p.SetLoss(100); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	srv.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := srv.Read(got[:1]); err == nil {
		t.Fatal("a byte crossed a path that drops every packet")
	}
	if err := p.SetLoss(0); err != nil {
		t.Fatal(err)
	}
	srv.SetReadDeadline(time.Now().Add(2 * time.Minute)) // TCP retransmits after its backoff
	if _, err := io.ReadFull(srv, got[:1]); err != nil || got[0] != 'x' {
		t.Fatalf("after the loss was lifted: %q, %v", got[:1], err)
	}

	names := []string{"/run/netns/" + p.nsName("a"), "/run/netns/" + p.nsName("b")}
	for _, n := range names {
		if _, err := os.Stat(n); err != nil {
			t.Fatalf("namespace %s: %v", n, err)
		}
	}
	closed = true
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, err := os.Stat(n); !os.IsNotExist(err) {
			t.Errorf("namespace %s left after Close: %v", n, err)
		}
	}
}
