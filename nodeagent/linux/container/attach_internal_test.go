package container

import (
	"net"
	"path/filepath"
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
