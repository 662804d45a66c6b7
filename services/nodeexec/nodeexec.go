// Package nodeexec carries the streams of pods/exec and pods/attach
// between the api stage and the pod's node agent over core NATS.
//
// A session opens with a request to OpenSubject(node) naming the pod, the
// container and the command, and a fresh session id. Then frames travel on
// two per-session subjects: SessionSubject(node, id, In) from the api stage
// to the node (stdin, terminal resizes, cancel) and SessionSubject(node,
// id, Out) back (stdout, stderr and, last, the end with the exit code).
// Data frames are numbered per direction; a gap ends the session. Each
// side has at most Config.Window data frames unacknowledged: the receiver
// acknowledges a frame once it has written it on, so a slow reader slows
// the writer instead of queueing without bound. Both sides send a ping
// every Config.Heartbeat and give up on a peer not heard from for
// Config.LostAfter (node loss, api stage loss). A session leaves no
// subscription or goroutine behind however it ends.
package nodeexec

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/services/pipeline"
)

// Directions of a session's subjects.
const (
	In  = "in"  // api stage → node
	Out = "out" // node → api stage
)

// OpenSubject is where node's agent accepts sessions.
func OpenSubject(node string) string { return pipeline.ExecPrefix + "." + bus.EncodeToken(node) }

// SessionSubject is one direction of a session's frames.
func SessionSubject(node, session, dir string) string {
	return OpenSubject(node) + "." + session + "." + dir
}

// Request opens a session: exec Command in a container of a pod, attach
// to it (Attach, no Command), or forward a connection to Port of the pod
// (kubectl port-forward: stdin and stdout are the connection's two ways).
type Request struct {
	Session   string   `json:"session"`
	Node      string   `json:"node"`
	Namespace string   `json:"namespace"`
	Pod       string   `json:"pod"`
	UID       string   `json:"uid,omitempty"`
	Container string   `json:"container,omitempty"`
	Command   []string `json:"command,omitempty"`
	Attach    bool     `json:"attach,omitempty"`
	Port      int32    `json:"port,omitempty"`
	Stdin     bool     `json:"stdin,omitempty"`
	Stdout    bool     `json:"stdout,omitempty"`
	Stderr    bool     `json:"stderr,omitempty"`
	TTY       bool     `json:"tty,omitempty"`
}

// openReply answers a Request: Error is set when the node refused it.
type openReply struct {
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
}

// Streams of a frame (the stdio ones are their file descriptors).
const (
	StreamStdin  = 0
	StreamStdout = 1
	StreamStderr = 2
)

// Size is a terminal's size.
type Size struct {
	Width  uint16 `json:"width"`
	Height uint16 `json:"height"`
}

// frame is one message of a session.
type frame struct {
	// Seq numbers data, close and end frames (1, 2, …) per direction.
	Seq    uint64 `json:"seq,omitempty"`
	Stream int    `json:"stream,omitempty"`
	Data   []byte `json:"data,omitempty"`
	// Close ends Stream (stdin's EOF).
	Close bool `json:"close,omitempty"`
	// Resize is a terminal resize (api stage → node).
	Resize *Size `json:"resize,omitempty"`
	// End ends the session: the exit code or an error (node → api
	// stage), or the client gone (api stage → node).
	End *end `json:"end,omitempty"`
	// Ack acknowledges data frames: the receiver has written this many
	// (cumulative). Ping says the sender is alive. Neither is numbered.
	Ack  uint64 `json:"ack,omitempty"`
	Ping bool   `json:"ping,omitempty"`
}

type end struct {
	ExitCode int    `json:"exitCode"`
	Error    string `json:"error,omitempty"`
	Code     string `json:"code,omitempty"`
}

// Error codes a node reports (matched by code, never by text).
const (
	CodeNotFound = "NotFound" // no such pod or container on this node
	CodeInvalid  = "Invalid"  // a malformed request
	CodeInternal = "Internal"
)

// Errors.
var (
	// ErrNotFound: the node has no such pod or container.
	ErrNotFound = errors.New("nodeexec: no such pod or container on the node")
	// ErrRefused: the node refused the session for another reason.
	ErrRefused = errors.New("nodeexec: the node refused the session")
	// ErrLost: the peer was not heard from for Config.LostAfter.
	ErrLost = errors.New("nodeexec: the peer was lost")
	// ErrProtocol: a frame out of sequence or beyond the window.
	ErrProtocol = errors.New("nodeexec: protocol violation")
	// ErrCanceled: the api stage ended the session (its client left).
	ErrCanceled = errors.New("nodeexec: the session was canceled")
)

// codeErr maps a node's code to an error.
func codeErr(code, msg string) error {
	switch code {
	case CodeNotFound:
		return fmt.Errorf("%w: %s", ErrNotFound, msg)
	default:
		return fmt.Errorf("%w: %s", ErrRefused, msg)
	}
}

// ExitError is a command that ran and exited non-zero.
type ExitError struct{ Code int }

func (e *ExitError) Error() string {
	return fmt.Sprintf("command terminated with exit code %d", e.Code)
}

// Config bounds a session.
type Config struct {
	// Window is how many data frames may be unacknowledged per direction.
	Window int
	// Chunk is the largest data frame, in bytes.
	Chunk int
	// Heartbeat is how often each side pings the other.
	Heartbeat time.Duration
	// LostAfter is how long a silent peer is waited for.
	LostAfter time.Duration
	// OpenTimeout bounds the open request.
	OpenTimeout time.Duration
}

// DefaultConfig is 64 frames of 32 KiB in flight (2 MiB), a ping every 5s
// and a peer lost after 20s.
func DefaultConfig() Config {
	return Config{Window: 64, Chunk: 32 << 10, Heartbeat: 5 * time.Second, LostAfter: 20 * time.Second, OpenTimeout: 10 * time.Second}
}

// Validate checks the bounds.
func (c Config) Validate() error {
	switch {
	case c.Window < 1:
		return fmt.Errorf("nodeexec: Window (%d) must be at least 1", c.Window)
	case c.Chunk < 1 || c.Chunk > 256<<10:
		return fmt.Errorf("nodeexec: Chunk (%d) must be in [1, 256 KiB]", c.Chunk)
	case c.Heartbeat <= 0:
		return fmt.Errorf("nodeexec: Heartbeat (%s) must be positive", c.Heartbeat)
	case c.LostAfter <= c.Heartbeat:
		return fmt.Errorf("nodeexec: LostAfter (%s) must be longer than Heartbeat (%s)", c.LostAfter, c.Heartbeat)
	case c.OpenTimeout <= 0:
		return fmt.Errorf("nodeexec: OpenTimeout (%s) must be positive", c.OpenTimeout)
	}
	return nil
}

// NewSession is a fresh session id (128 random bits, a subject token).
func NewSession() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// peer is one side of a session: it sends numbered frames within the
// window, and hands the frames it receives, in order, to its loop.
type peer struct {
	nc   *nats.Conn
	cfg  Config
	send string // subject frames go to
	sub  *nats.Subscription

	ctx    context.Context
	cancel context.CancelCauseFunc
	// inflight holds one token per unacknowledged data frame sent.
	inflight chan struct{}
	mu       sync.Mutex
	seq      uint64 // last numbered frame sent
	sent     uint64 // data frames sent
	acked    uint64 // data frames acknowledged
	written  uint64 // data frames received and written on
	// resize gets the terminal resizes received (the latest kept).
	resize chan Size
	// recv gets the numbered frames received, in order; lastSeq is the
	// last one's number (touched by the subscription's callback only).
	recv    chan frame
	lastSeq uint64
	heard   atomic.Int64 // unix nanoseconds the peer was last heard
}

func newPeer(ctx context.Context, nc *nats.Conn, cfg Config, send, recv string) (*peer, error) {
	p := &peer{nc: nc, cfg: cfg, send: send, inflight: make(chan struct{}, cfg.Window),
		recv: make(chan frame, cfg.Window+4), resize: make(chan Size, 1)}
	p.ctx, p.cancel = context.WithCancelCause(ctx)
	p.heard.Store(time.Now().UnixNano())
	sub, err := nc.Subscribe(recv, p.onMsg)
	if err != nil {
		p.cancel(err)
		return nil, fmt.Errorf("nodeexec: subscribe %q: %w", recv, err)
	}
	p.sub = sub
	return p, nil
}

// onMsg runs on the subscription's goroutine: acks and pings are handled
// here, numbered frames queued for the loop.
func (p *peer) onMsg(m *nats.Msg) {
	var f frame
	if err := json.Unmarshal(m.Data, &f); err != nil {
		p.cancel(fmt.Errorf("%w: %v", ErrProtocol, err))
		return
	}
	p.heard.Store(time.Now().UnixNano())
	if f.Ack > 0 {
		p.mu.Lock()
		for p.acked < f.Ack && p.acked < p.sent {
			p.acked++
			select {
			case <-p.inflight:
			default:
			}
		}
		p.mu.Unlock()
	}
	if f.Resize != nil {
		select {
		case <-p.resize: // the latest size is all that matters
		default:
		}
		p.resize <- *f.Resize
	}
	if f.Seq == 0 {
		if f.End != nil { // the api stage's cancel (its client left): unnumbered, it may pass queued data
			p.cancel(ErrCanceled)
		}
		return // an ack, a ping or a resize
	}
	if f.Seq != p.lastSeq+1 {
		p.cancel(fmt.Errorf("%w: frame %d after %d", ErrProtocol, f.Seq, p.lastSeq))
		return
	}
	p.lastSeq = f.Seq
	select {
	case p.recv <- f:
	default:
		p.cancel(fmt.Errorf("%w: more than %d frames unacknowledged", ErrProtocol, p.cfg.Window))
	}
}

// publish sends an unnumbered frame.
func (p *peer) publish(f frame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return p.nc.Publish(p.send, b)
}

// sendFrame numbers f and sends it; data frames wait for room in the
// window first.
func (p *peer) sendFrame(f frame) error {
	if len(f.Data) > 0 {
		select {
		case p.inflight <- struct{}{}:
		case <-p.ctx.Done():
			return context.Cause(p.ctx)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	f.Seq = p.seq
	if len(f.Data) > 0 {
		p.sent++
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return p.nc.Publish(p.send, b)
}

// write sends data on stream in chunks.
func (p *peer) write(stream int, data []byte) error {
	for len(data) > 0 {
		n := min(len(data), p.cfg.Chunk)
		if err := p.sendFrame(frame{Stream: stream, Data: append([]byte(nil), data[:n]...)}); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// wrote acknowledges a data frame written on.
func (p *peer) wrote() {
	p.written++ // the loop's alone
	_ = p.publish(frame{Ack: p.written})
}

// heartbeat pings the peer every Heartbeat and ends the session once the
// peer has been silent for LostAfter; it returns when the session ends.
func (p *peer) heartbeat() {
	t := time.NewTicker(p.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
			if p.lost() {
				p.cancel(ErrLost)
				return
			}
			_ = p.publish(frame{Ping: true})
		}
	}
}

// lost reports whether the peer has been silent for LostAfter.
func (p *peer) lost() bool {
	return time.Since(time.Unix(0, p.heard.Load())) > p.cfg.LostAfter
}

// close unsubscribes; the frames still queued are dropped.
func (p *peer) close(cause error) {
	p.cancel(cause)
	if p.sub != nil {
		_ = p.sub.Unsubscribe()
	}
}

// streamWriter writes one stream of a peer.
type streamWriter struct {
	p      *peer
	stream int
}

func (w streamWriter) Write(b []byte) (int, error) {
	if err := w.p.write(w.stream, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

var _ io.Writer = streamWriter{}

// ExitStatus is the exit code (as k8s.io/utils/exec.ExitError's).
func (e *ExitError) ExitStatus() int { return e.Code }
