package container

// Attach (kubectl attach, run -i): the shim holds the container's stdio —
// the write end of its stdin pipe or, with a terminal, the pty master — and
// serves it on a unix socket in the container directory, so an attach
// reaches the live container whichever agent process asks, and the stdin
// survives agent restarts. Frames on the socket are one type byte, a
// 4-byte big-endian length and the data.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// attachSock is the shim's attach socket in the container directory.
const attachSock = "attach.sock"

// Frame types. The shim's first frame is a hello too: it will end the
// attach with frameExit (a shim of an older podflow sends neither).
const (
	frameHello  = 0 // client → shim: data[0] = 1 when the client streams stdin
	frameStdin  = 1 // client → shim
	frameEOF    = 2 // client → shim: its stdin ended
	frameResize = 3 // client → shim: width, height (2 bytes each)
	frameStdout = 4 // shim → client
	frameStderr = 5 // shim → client
	frameExit   = 6 // shim → client: the container exited, its output is all sent
)

// maxFrame bounds a frame's data.
const maxFrame = 64 << 10

// attachQueue is how many output chunks a client may lag behind; a client
// further behind is disconnected (the container never waits for an attach).
const attachQueue = 256

// ErrNoAttach: the container's shim serves no attach socket (it has exited,
// or was started before shims served one).
var ErrNoAttach = errors.New("container: the container serves no attach")

// ErrAttachCut: the attach ended before the container exited — the shim
// dropped it (it read the output too slowly) or went away.
var ErrAttachCut = errors.New("container: the attach ended before the container exited")

func writeFrame(w io.Writer, typ byte, data []byte) error {
	b := make([]byte, 5+len(data))
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:], uint32(len(data)))
	copy(b[5:], data)
	_, err := w.Write(b)
	return err
}

func readFrame(r io.Reader) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("container: attach frame of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, nil, err
	}
	return h[0], b, nil
}

// sockPath is dir's attach socket as a path short enough for a sockaddr
// whatever dir's length: through /proc/self/fd of an O_PATH descriptor of
// dir, which the caller closes.
func sockPath(dir string) (string, *os.File, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, err
	}
	f := os.NewFile(uintptr(fd), dir)
	return "/proc/self/fd/" + strconv.Itoa(fd) + "/" + attachSock, f, nil
}

// attachHub is the shim's side: it broadcasts the container's output to
// the attached clients and writes what they send to its stdin.
type attachHub struct {
	ln   *net.UnixListener
	once bool     // stdinOnce
	tty  *os.File // the pty master, with a terminal

	stdinMu sync.Mutex
	stdin   io.WriteCloser // nil: no stdin (or closed)

	mu      sync.Mutex
	clients map[*attachClient]struct{}
	closed  bool
	joined  chan *attachClient // tests: told of each client accepted
	drainBy time.Time          // set by close: when senders stop waiting for clients to leave
	wg      sync.WaitGroup
}

type attachClient struct {
	conn     net.Conn
	out      chan []byte   // framed chunks; closed by the hub
	received chan struct{} // closed when receive returns
}

// serveAttach listens on dir's attach socket. stdin (nil: none) is what
// attached clients write to; tty the pty master, when there is one.
func serveAttach(dir string, stdin io.WriteCloser, tty *os.File, once bool) (*attachHub, error) {
	path, d, err := sockPath(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	_ = os.Remove(filepath.Join(dir, attachSock)) // a previous instance's
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("attach socket: %w", err)
	}
	ln.SetUnlinkOnClose(false) // the path through /proc is this process's
	if err := os.Chmod(filepath.Join(dir, attachSock), 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	h := &attachHub{ln: ln, once: once, tty: tty, stdin: stdin, clients: map[*attachClient]struct{}{}}
	h.wg.Add(1)
	go h.accept()
	return h, nil
}

func (h *attachHub) accept() {
	defer h.wg.Done()
	for {
		conn, err := h.ln.Accept()
		if err != nil {
			return // closed
		}
		c := &attachClient{conn: conn, out: make(chan []byte, attachQueue), received: make(chan struct{})}
		c.out <- []byte{frameHello, 0, 0, 0, 0}
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			conn.Close()
			return
		}
		h.clients[c] = struct{}{}
		h.wg.Add(2)
		joined := h.joined
		h.mu.Unlock()
		if joined != nil {
			joined <- c
		}
		go h.send(c)
		go h.receive(c)
	}
}

// send writes c's queued output until the hub closes its queue, then ends
// the connection in order: a half-close (the client reads the output, then
// EOF), and the close itself only once receive has read to the client's
// own end (or the hub's wait is over). Closing a unix stream socket with
// data still unread in its receive queue — stdin the client sent while the
// container exited — makes the client's read fail with ECONNRESET instead
// of EOF, as a TCP reset would.
func (h *attachHub) send(c *attachClient) {
	defer h.wg.Done()
	defer c.conn.Close()
	for b := range c.out {
		_ = c.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.conn.Write(b); err != nil {
			h.drop(c)
			for range c.out { // until closed
			}
			return
		}
	}
	// Dropped, the connection is closed already and these fail; closed by
	// the hub, drainBy is set.
	if uc, ok := c.conn.(*net.UnixConn); ok {
		_ = uc.CloseWrite()
	}
	h.mu.Lock()
	by := h.drainBy
	h.mu.Unlock()
	_ = c.conn.SetReadDeadline(by)
	t := time.NewTimer(time.Until(by))
	defer t.Stop()
	select {
	case <-c.received:
	case <-t.C: // receive may be stuck writing to the stdin
	}
}

// receive reads c's frames until it leaves.
func (h *attachHub) receive(c *attachClient) {
	defer h.wg.Done()
	defer close(c.received)
	withStdin := false
	defer func() {
		h.drop(c)
		if withStdin {
			h.stdinEnded()
		}
	}()
	for {
		typ, data, err := readFrame(c.conn)
		if err != nil {
			return
		}
		switch typ {
		case frameHello:
			withStdin = len(data) > 0 && data[0] == 1
		case frameStdin:
			h.stdinMu.Lock()
			if h.stdin != nil {
				_, _ = h.stdin.Write(data)
			}
			h.stdinMu.Unlock()
		case frameEOF:
			withStdin = false
			h.stdinEnded()
		case frameResize:
			if h.tty != nil && len(data) == 4 {
				ws := unix.Winsize{Col: binary.BigEndian.Uint16(data), Row: binary.BigEndian.Uint16(data[2:])}
				_ = unix.IoctlSetWinsize(int(h.tty.Fd()), unix.TIOCSWINSZ, &ws)
			}
		}
	}
}

// stdinEnded is an attach's stdin ending: with stdinOnce the container's
// stdin is closed (with a terminal: an end-of-file character is typed,
// as the terminal stays the command's stdout), else it stays open for the
// next attach.
func (h *attachHub) stdinEnded() {
	if !h.once {
		return
	}
	h.stdinMu.Lock()
	defer h.stdinMu.Unlock()
	if h.stdin == nil {
		return
	}
	if h.tty != nil {
		_, _ = h.tty.Write([]byte{4}) // VEOF
	} else {
		_ = h.stdin.Close()
	}
	h.stdin = nil
}

// drop disconnects c.
func (h *attachHub) drop(c *attachClient) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.clients[c]; ok {
		delete(h.clients, c)
		close(c.out)
	}
	_ = c.conn.Close()
}

// writer is the hub's side of one output stream: each chunk is queued for
// every client; a client whose queue is full is dropped.
func (h *attachHub) writer(typ byte) io.Writer {
	return writerFunc(func(b []byte) {
		h.mu.Lock()
		defer h.mu.Unlock()
		for len(b) > 0 && len(h.clients) > 0 {
			n := min(len(b), maxFrame)
			f := make([]byte, 5+n)
			f[0] = typ
			binary.BigEndian.PutUint32(f[1:], uint32(n))
			copy(f[5:], b[:n])
			for c := range h.clients {
				select {
				case c.out <- f:
				default: // too far behind
					delete(h.clients, c)
					close(c.out)
					_ = c.conn.Close()
				}
			}
			b = b[n:]
		}
	})
}

// writerFunc is an io.Writer that never fails.
type writerFunc func([]byte)

func (f writerFunc) Write(b []byte) (int, error) {
	f(b)
	return len(b), nil
}

// close is the container's exit: it stops accepting, flushes every
// client's output and a frameExit, ends it with EOF and disconnects the
// client once it has left (see send), waiting at most wait for slow ones.
func (h *attachHub) close(wait time.Duration) {
	h.mu.Lock()
	h.closed = true
	h.drainBy = time.Now().Add(wait)
	_ = h.ln.Close()
	exit := []byte{frameExit, 0, 0, 0, 0}
	for c := range h.clients {
		delete(h.clients, c)
		select {
		case c.out <- exit:
		default: // too far behind: cut, without the exit
			_ = c.conn.Close()
		}
		close(c.out)
		// the sender flushes, half-closes, waits for receive, closes conn
	}
	h.mu.Unlock()
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
	}
}

// Attach connects to the running container's stdio (kubectl attach): its
// output from now on goes to stdio.Stdout and stdio.Stderr (with a
// terminal, all of it to Stdout) and stdio.Stdin to its stdin, when the
// container keeps one open (Spec.Stdin); at stdio.Stdin's end the
// container's stdin is closed if Spec.StdinOnce, else kept for the next
// attach. Resizes go to the container's terminal. Attach returns nil when
// the container exits (its output copied) and ctx's error when ctx ends
// first; ErrNoAttach when the container serves no attach, and an error
// matching ErrAttachCut when the attach ends before the container exits
// (a client too slow to read the output is dropped).
func (c *Container) Attach(ctx context.Context, stdio Stdio) error {
	if c.State().Status != StatusRunning {
		return ErrNoAttach
	}
	path, d, err := sockPath(c.Dir)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoAttach, err)
	}
	var dl net.Dialer
	conn, err := dl.DialContext(ctx, "unix", path)
	d.Close()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %v", ErrNoAttach, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	var wmu sync.Mutex
	send := func(typ byte, data []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return writeFrame(conn, typ, data)
	}
	hello := []byte{0}
	if stdio.Stdin != nil {
		hello[0] = 1
	}
	if err := send(frameHello, hello); err != nil {
		return fmt.Errorf("%w: %v", ErrNoAttach, err)
	}
	if stdio.Stdin != nil {
		go func() { // returns when stdio.Stdin's Read does (see Stdio)
			buf := make([]byte, 32<<10)
			for {
				n, err := stdio.Stdin.Read(buf)
				if n > 0 && send(frameStdin, buf[:n]) != nil {
					return
				}
				if err != nil {
					_ = send(frameEOF, nil)
					return
				}
			}
		}()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	rctx, stopResize := context.WithCancel(ctx)
	defer stopResize() // before wg.Wait
	if stdio.Resize != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				w, h, ok := stdio.Resize(rctx)
				if !ok {
					return
				}
				var b [4]byte
				binary.BigEndian.PutUint16(b[:], w)
				binary.BigEndian.PutUint16(b[2:], h)
				if send(frameResize, b[:]) != nil {
					return
				}
			}
		}()
	}
	if err := copyOutput(conn, stdio); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("container: attach %q: %w", c.ID, err)
	}
	return nil
}

// copyOutput copies the output frames read from conn to stdio until the
// frameExit: nil. An end of the connection before it is ErrAttachCut (or,
// a reset, the read's error); what follows it does not matter. A shim of
// an older podflow sends neither hello nor exit: its EOF is the exit.
func copyOutput(conn io.Reader, stdio Stdio) error {
	endsWithExit := false
	for {
		typ, data, err := readFrame(conn)
		if errors.Is(err, io.EOF) && !endsWithExit {
			return nil
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return ErrAttachCut
		}
		if err != nil {
			return err
		}
		w := stdio.Stdout
		switch {
		case typ == frameHello:
			endsWithExit = true
			continue
		case typ == frameExit:
			return nil
		case typ == frameStderr && !stdio.TTY:
			w = stdio.Stderr
		}
		if w != nil {
			if _, err := w.Write(data); err != nil {
				return err
			}
		}
	}
}
