package container_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/podflow/podflow/nodeagent/linux/container"
)

// syncBuf is a buffer written by an attach and read by the test, which may
// wait for a string to appear in it.
type syncBuf struct {
	mu   sync.Mutex
	b    bytes.Buffer
	want string
	seen chan struct{}
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Write(p)
	if s.seen != nil && strings.Contains(s.b.String(), s.want) {
		close(s.seen)
		s.seen = nil
	}
	return len(p), nil
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// await returns a channel closed once want has been written.
func (s *syncBuf) await(want string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	if strings.Contains(s.b.String(), want) {
		close(ch)
		return ch
	}
	s.want, s.seen = want, ch
	return ch
}

// TestAttachStdinOnce attaches to a container that keeps its stdin open
// (kubectl run -i): what the attach sends is the container's stdin, its
// output comes back on two streams, and, stdinOnce, the end of the
// attach's stdin is the container's EOF (without it cat never ends and
// Attach waits for ctx).
func TestAttachStdinOnce(t *testing.T) {
	spec := newSpec(t, "sh", "-c", "read a; echo got $a; echo err >&2; cat; echo end")
	spec.Stdin, spec.StdinOnce = true, true
	c := start(t, spec)
	ctx := ctx20(t)
	var stdout, stderr syncBuf
	err := c.Attach(ctx, container.Stdio{Stdin: strings.NewReader("hello\nmore\n"), Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if stdout.String() != "got hello\nmore\nend\n" || stderr.String() != "err\n" {
		t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
	st, err := c.Wait(ctx)
	if err != nil || st.ExitCode != 0 {
		t.Fatalf("Wait = %+v, %v", st, err)
	}
	if err := c.Attach(ctx, container.Stdio{}); !errors.Is(err, container.ErrNoAttach) {
		t.Errorf("Attach to an exited container: %v, want ErrNoAttach", err)
	}
}

// TestAttachStdinStaysOpen: without stdinOnce the container's stdin
// outlives an attach, so a second attach — through another handle, as a
// restarted agent has — types the next line (were it closed, the second
// read would get EOF and print an empty line).
func TestAttachStdinStaysOpen(t *testing.T) {
	spec := newSpec(t, "sh", "-c", "read a; echo first $a; read b; echo second $b")
	spec.Stdin = true
	c := start(t, spec)
	ctx := ctx20(t)
	var out1 syncBuf
	first := out1.await("first one\n")
	actx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Attach(actx, container.Stdio{Stdin: strings.NewReader("one\n"), Stdout: &out1}) }()
	select {
	case <-first:
	case <-ctx.Done():
		t.Fatalf("first attach saw %q", out1.String())
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("first Attach: %v, want context.Canceled", err)
	}
	if c.State().Status != container.StatusRunning {
		t.Fatalf("the container ended with the first attach: %+v", c.State())
	}
	again, err := container.Open(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	var out2 syncBuf
	if err := again.Attach(ctx, container.Stdio{Stdin: strings.NewReader("two\n"), Stdout: &out2}); err != nil {
		t.Fatalf("second Attach: %v", err)
	}
	if out2.String() != "second two\n" {
		t.Errorf("second attach got %q", out2.String())
	}
}

// TestAttachUnreadStdin: a container that exits while the attach still
// sends it stdin (here without end) leaves that stdin unread in the shim;
// the attach still gets the whole output and then an orderly end (were the
// shim to close its socket with the stdin unread, the attach would read
// ECONNRESET), and the exit code is the container's.
func TestAttachUnreadStdin(t *testing.T) {
	spec := newSpec(t, "sh", "-c", "head -c 100000 >/dev/null; echo done; exit 3")
	spec.Stdin = true
	c := start(t, spec)
	ctx := ctx20(t)
	var out syncBuf
	if err := c.Attach(ctx, container.Stdio{Stdin: endless{}, Stdout: &out}); err != nil {
		t.Fatalf("Attach: %v (output %q)", err, out.String())
	}
	if out.String() != "done\n" {
		t.Errorf("output %q, want %q", out.String(), "done\n")
	}
	st, err := c.Wait(ctx)
	if err != nil || st.ExitCode != 3 {
		t.Fatalf("Wait = %+v, %v; want exit code 3", st, err)
	}
}

// endless is a stdin that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// TestAttachTTY attaches to a container on a terminal held by the shim
// (kubectl run -it): the command's stdin and stdout are a terminal whose
// size follows the attach's resizes.
func TestAttachTTY(t *testing.T) {
	spec := newSpec(t, "sh", "-c", "read a; [ -t 0 ] && [ -t 1 ] && echo terminal; stty size; echo got $a")
	spec.Stdin, spec.StdinOnce, spec.TTY = true, true, true
	c := start(t, spec)
	ctx := ctx20(t)
	resized := make(chan struct{})
	calls := 0
	resize := func(ctx context.Context) (uint16, uint16, bool) {
		if calls++; calls == 1 {
			return 120, 40, true
		}
		if calls == 2 { // the first size has been sent
			close(resized)
		}
		<-ctx.Done()
		return 0, 0, false
	}
	stdin := &gatedReader{gate: resized, r: strings.NewReader("typed\n")}
	var out syncBuf
	if err := c.Attach(ctx, container.Stdio{Stdin: stdin, Stdout: &out, TTY: true, Resize: resize}); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	for _, want := range []string{"terminal\r\n", "40 120\r\n", "got typed\r\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output %q lacks %q", out.String(), want)
		}
	}
}

// gatedReader reads r once gate is closed.
type gatedReader struct {
	gate <-chan struct{}
	r    io.Reader
}

func (g *gatedReader) Read(p []byte) (int, error) {
	<-g.gate
	return g.r.Read(p)
}
