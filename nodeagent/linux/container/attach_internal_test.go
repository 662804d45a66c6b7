package container

import (
	"bytes"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
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
	conn := dialAttach(t, h, dir)
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
	if err := copyOutput(conn, Stdio{}); !errors.Is(err, ErrAttachCut) {
		t.Errorf("the dropped client reads to %v, want ErrAttachCut", err)
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

// TestAttachEndsWithEOF: when the container exits while stdin the client
// sent is still unread in the shim's socket (the container did not read
// it), the client gets the whole output, the exit and then EOF, not
// ECONNRESET, which closing a unix socket with unread data gives its peer.
func TestAttachEndsWithEOF(t *testing.T) {
	dir := t.TempDir()
	stdin := &blockedStdin{entered: make(chan struct{}), release: make(chan struct{})}
	h, err := serveAttach(dir, stdin, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	conn := dialAttach(t, h, dir)
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

	if typ, data, err := readFrame(conn); err != nil || typ != frameHello {
		t.Fatalf("first frame %d %q, %v; want the shim's hello", typ, data, err)
	}
	var out []byte
	exited := false
	for {
		typ, data, err := readFrame(conn)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read after %q: %v, want EOF", out, err)
		}
		switch {
		case typ == frameStdout && !exited:
			out = append(out, data...)
		case typ == frameExit && !exited:
			exited = true
		default:
			t.Fatalf("frame type %d (exit read: %v)", typ, exited)
		}
	}
	if string(out) != "last line\n" || !exited {
		t.Errorf("output %q, exit read %v; want %q and the exit", out, exited, "last line\n")
	}
}

// TestCopyOutput: an attach succeeds at the shim's exit frame (what
// follows it does not matter), is cut if the stream ends before it, and
// with a shim of an older podflow (no hello, no exit) ends at EOF.
func TestCopyOutput(t *testing.T) {
	frame := func(typ byte, data string) string {
		var b bytes.Buffer
		_ = writeFrame(&b, typ, []byte(data))
		return b.String()
	}
	hello, exit := frame(frameHello, ""), frame(frameExit, "")
	out, errOut := frame(frameStdout, "out\n"), frame(frameStderr, "err\n")
	for _, tc := range []struct {
		name, stream string
		wantErr      error
		wantOut      string
	}{
		{"exit", hello + out + errOut + exit, nil, "out\n"},
		{"after the exit", hello + out + exit + "\x07garbage", nil, "out\n"},
		{"cut", hello + out, ErrAttachCut, "out\n"},
		{"cut in a frame", hello + out + errOut[:7], ErrAttachCut, "out\n"},
		{"older shim", out + errOut, nil, "out\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := copyOutput(strings.NewReader(tc.stream), Stdio{Stdout: &stdout, Stderr: &stderr})
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("copyOutput = %v, want %v", err, tc.wantErr)
			}
			if stdout.String() != tc.wantOut {
				t.Errorf("stdout %q, want %q", stdout.String(), tc.wantOut)
			}
		})
	}
}

// dialAttach connects to h, serving in dir, and returns once h has
// accepted the connection (closed when the test ends).
func dialAttach(t *testing.T, h *attachHub, dir string) net.Conn {
	t.Helper()
	joined := make(chan *attachClient, 1)
	h.mu.Lock()
	h.joined = joined
	h.mu.Unlock()
	conn, err := net.Dial("unix", filepath.Join(dir, attachSock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	<-joined
	return conn
}
