package e2e

import (
	"bytes"
	"os"
	"sync"
)

var bufMu sync.Mutex

// lockedWriter serialises writes into a shared buffer so tests can read it
// while the process writes.
type lockedWriter struct{ b *bytes.Buffer }

func (w lockedWriter) Write(p []byte) (int, error) {
	bufMu.Lock()
	defer bufMu.Unlock()
	return w.b.Write(p)
}

func syncBufString(b *bytes.Buffer) string {
	bufMu.Lock()
	defer bufMu.Unlock()
	return b.String()
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }

// lockedBuf is a bytes.Buffer safe for a process writing while a test reads.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
