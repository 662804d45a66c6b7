package container

import (
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestAttachSlowClientDropped: an attached client that reads nothing is
// disconnected once attachQueue chunks wait for it, so the container's
// output (the writer) never waits for an attach (with a blocking queue the
// writes below would never return).
func TestAttachSlowClientDropped(t *testing.T) {
	dir := t.TempDir()
	h, err := serveAttach(dir, nil, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close(time.Second)
	joined := make(chan *attachClient, 1)
	h.mu.Lock()
	h.joined = joined
	h.mu.Unlock()
	conn, err := net.Dial("unix", filepath.Join(dir, attachSock))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	<-joined
	w := h.writer(frameStdout)
	chunk := make([]byte, maxFrame)
	for range 4 * attachQueue { // far beyond the socket's buffer and the queue
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	h.mu.Lock()
	n := len(h.clients)
	h.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d clients still attached, want the slow one dropped", n)
	}
}

// blockedStdin is a container stdin nobody reads: a write blocks until
// release is closed.
type blockedStdin struct {
	entered chan struct{} // closed at the first write
	release chan struct{}
	once    sync.Once
}

func (b *blockedStdin) Write(p []byte) (int, error) {
	b.once.Do(func() { close(b.entered) })
	<-b.release
	return len(p), nil
}

func (b *blockedStdin) Close() error { return nil }

// TestAttachEndsWithEOF: when the container's output ends while stdin the
// client sent is still unread in the shim's socket (the container exited
// without reading it), the client gets the whole output and then EOF, not
// ECONNRESET, which closing a unix socket with unread data gives its peer.
func TestAttachEndsWithEOF(t *testing.T) {
	dir := t.TempDir()
	stdin := &blockedStdin{entered: make(chan struct{}), release: make(chan struct{})}
	h, err := serveAttach(dir, stdin, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	joined := make(chan *attachClient, 1)
	h.mu.Lock()
	h.joined = joined
	h.mu.Unlock()
	conn, err := net.Dial("unix", filepath.Join(dir, attachSock))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	<-joined
	for _, f := range []struct {
		typ  byte
		data string
	}{{frameHello, "\x01"}, {frameStdin, "read by the shim\n"}} {
		if err := writeFrame(conn, f.typ, []byte(f.data)); err != nil {
			t.Fatal(err)
		}
	}
	<-stdin.entered // the shim's receive is stuck on the stdin: what follows stays unread
	if err := writeFrame(conn, frameStdin, []byte("never read\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.writer(frameStdout).Write([]byte("last line\n")); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { h.close(20 * time.Second); close(closed) }()
	defer func() { // the client leaves, the shim's receive reads to its end
		conn.Close()
		close(stdin.release)
		<-closed
	}()

	var out []byte
	for {
		typ, data, err := readFrame(conn)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read after %q: %v, want EOF", out, err)
		}
		if typ != frameStdout {
			t.Fatalf("frame type %d", typ)
		}
		out = append(out, data...)
	}
	if string(out) != "last line\n" {
		t.Errorf("output %q, want %q", out, "last line\n")
	}
}
