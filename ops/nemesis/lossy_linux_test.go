package nemesis

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netns"
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

// TestNetLose (root): a Net over a LossyPath carries its relayed
// connections through the path, so Lose(100) stops them and Heal lets
// them through; a Net without a path refuses Lose.
func TestNetLose(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, nftables)")
	}
	plain, err := New(map[string]string{"a": "127.0.0.1:1", "b": "127.0.0.1:2"})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.Apply(Lose(10)); err == nil {
		t.Fatal("Lose on a Net without a lossy path")
	}
	ls, targets := twoNodes(t)
	p, err := NewLossyPath([]string{targets["a"], targets["b"]})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	n, err := NewVia(targets, p)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c, srv := relayedConn(t, n, ls["b"])
	defer c.Close()
	defer srv.Close()
	if err := n.Apply(Lose(100)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	srv.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := srv.Read(b); err == nil {
		t.Fatal("a byte crossed the relay at 100% loss")
	}
	if d, err := p.Drops(); err != nil || d == 0 {
		t.Fatalf("no packet dropped (%d, %v)", d, err)
	}
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	srv.SetReadDeadline(time.Now().Add(2 * time.Minute))
	if _, err := io.ReadFull(srv, b); err != nil || b[0] != 'y' {
		t.Fatalf("after the heal: %q, %v", b, err)
	}
}

// TestSweepLossyLeftovers: the namespaces of a LossyPath whose process
// died before Close (a chaos run SIGKILLed) are removed by the next
// NewLossyPath; a live process's are left alone.
func TestSweepLossyLeftovers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("%s%d-swept-a", lossyPrefix, dead.Process.Pid)
	live := fmt.Sprintf("%s%d-kept-a", lossyPrefix, os.Getpid())
	for _, name := range []string{stale, live} {
		ns, err := newNamedNS(name)
		if err != nil {
			t.Fatal(err)
		}
		ns.Close()
		t.Cleanup(func() { _ = netns.DeleteNamed(name) })
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
	defer p.Close()
	if _, err := os.Stat(filepath.Join(netnsDir, stale)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dead process's namespace %s was not removed: %v", stale, err)
	}
	if _, err := os.Stat(filepath.Join(netnsDir, live)); err != nil {
		t.Errorf("the live process's namespace %s was removed: %v", live, err)
	}
}
