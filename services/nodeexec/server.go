package nodeexec

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/services/pipeline"
)

// Executor runs sessions on a node: it execs req.Command in the pod's
// container (or attaches to it, req.Attach, or connects to req.Port in the
// pod's network namespace), copying st, and returns when
// the command ends: nil for exit code 0, an *ExitError for another, an
// error wrapping ErrNotFound when the node has no such pod or container.
// ctx ends when the session does (the client left, the api stage was
// lost): the command is then stopped.
type Executor interface {
	Exec(ctx context.Context, req Request, st Streams) error
}

// Server answers one node's sessions.
type Server struct {
	nc     *nats.Conn
	cfg    Config
	node   string
	exec   Executor
	log    *slog.Logger
	sub    *nats.Subscription
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// Serve answers node's sessions with exec until Stop; node "" answers
// every node's (a simulated cluster, whose Executor knows its nodes).
func Serve(nc *nats.Conn, cfg Config, node string, exec Executor, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Server{nc: nc, cfg: cfg, node: node, exec: exec, log: log}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	subject := OpenSubject(node)
	if node == "" {
		subject = pipeline.ExecPrefix + ".*"
	}
	sub, err := nc.Subscribe(subject, s.onOpen)
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("nodeexec: serve node %q: %w", node, err)
	}
	s.sub = sub
	if err := bus.Subscribed(s.ctx, nc, sub); err != nil { // subscribed before the first open
		s.cancel()
		return nil, fmt.Errorf("nodeexec: serve node %q: %w", node, err)
	}
	return s, nil
}

// Stop ends every session and waits for them. It is idempotent.
func (s *Server) Stop() {
	s.once.Do(func() {
		_ = s.sub.Unsubscribe()
		s.cancel()
	})
	s.wg.Wait()
}

func (s *Server) refuse(m *nats.Msg, code, format string, args ...any) {
	b, _ := json.Marshal(openReply{Error: fmt.Sprintf(format, args...), Code: code})
	_ = m.Respond(b)
}

func (s *Server) onOpen(m *nats.Msg) {
	var req Request
	if err := json.Unmarshal(m.Data, &req); err != nil {
		s.refuse(m, CodeInvalid, "decode: %v", err)
		return
	}
	if id, err := hex.DecodeString(req.Session); err != nil || len(id) != 16 {
		s.refuse(m, CodeInvalid, "bad session id %q", req.Session)
		return
	}
	if req.Node == "" || (s.node != "" && req.Node != s.node) {
		s.refuse(m, CodeNotFound, "this is node %q, not %q", s.node, req.Node)
		return
	}
	if !req.Attach && req.Port == 0 && len(req.Command) == 0 {
		s.refuse(m, CodeInvalid, "no command")
		return
	}
	if s.ctx.Err() != nil {
		s.refuse(m, CodeInternal, "the node is stopping")
		return
	}
	p, err := newPeer(s.ctx, s.nc, s.cfg, SessionSubject(req.Node, req.Session, Out), SessionSubject(req.Node, req.Session, In))
	if err != nil {
		s.refuse(m, CodeInternal, "%v", err)
		return
	}
	if err := m.Respond([]byte("{}")); err != nil {
		p.close(err)
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.session(p, req)
	}()
}

// session runs one session to its end and reports the end.
func (s *Server) session(p *peer, req Request) {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer p.close(context.Canceled)
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.heartbeat()
	}()
	st := Streams{Resize: p.resize}
	if req.Stdout {
		st.Stdout = streamWriter{p, StreamStdout}
	}
	if req.Stderr {
		st.Stderr = streamWriter{p, StreamStderr}
	}
	var pw *io.PipeWriter
	if req.Stdin {
		var pr *io.PipeReader
		pr, pw = io.Pipe()
		defer pr.Close()
		st.Stdin = pr
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if pw != nil {
			defer pw.Close()
		}
		for {
			select {
			case <-p.ctx.Done():
				return
			case f := <-p.recv:
				switch {
				case f.End != nil:
					p.cancel(ErrCanceled)
					return
				case f.Close && pw != nil:
					_ = pw.Close()
				case len(f.Data) > 0 && f.Stream == StreamStdin && pw != nil:
					if _, err := pw.Write(f.Data); err != nil {
						pw = nil // the command closed its stdin: drop the rest
					}
					p.wrote()
				case len(f.Data) > 0:
					p.wrote()
				}
			}
		}
	}()
	err := s.exec.Exec(p.ctx, req, st)
	e := &end{}
	var xe *ExitError
	switch {
	case err == nil:
	case errors.As(err, &xe):
		e.ExitCode = xe.Code
	case errors.Is(err, ErrNotFound):
		e.Error, e.Code = err.Error(), CodeNotFound
	default:
		e.Error, e.Code = err.Error(), CodeInternal
	}
	if p.ctx.Err() == nil {
		_ = p.sendFrame(frame{End: e})
	}
	s.log.Debug("exec session ended", "pod", req.Namespace+"/"+req.Pod, "container", req.Container, "err", err)
}
