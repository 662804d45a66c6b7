package nodeexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/services/pipeline"
)

// Streams are a session's ends: nil ones are not used. Resize, when set,
// carries terminal resizes.
type Streams struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Resize         <-chan Size
}

// Run runs one session on the api stage's side: it opens it on req.Node,
// copies st.Stdin to the node and the node's output to st.Stdout and
// st.Stderr, and returns when the node reports the end: nil for exit code
// 0, an *ExitError for another, ErrNotFound and the like when the node
// refused. When ctx ends first, the node is told to stop the command and
// ctx's error is returned. A goroutine reading st.Stdin returns when its
// Read does (the caller closes the stream once Run returns).
func Run(ctx context.Context, nc *nats.Conn, cfg Config, req Request, st Streams) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if req.Session == "" {
		req.Session = NewSession()
	}
	req.Stdin, req.Stdout, req.Stderr = st.Stdin != nil, st.Stdout != nil, st.Stderr != nil
	p, err := newPeer(ctx, nc, cfg, SessionSubject(req.Node, req.Session, In), SessionSubject(req.Node, req.Session, Out))
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer p.close(context.Canceled)
	if err := open(ctx, nc, cfg, req); err != nil {
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.heartbeat()
	}()
	if st.Resize != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-p.ctx.Done():
					return
				case sz, ok := <-st.Resize:
					if !ok {
						return
					}
					_ = p.publish(frame{Resize: &sz})
				}
			}
		}()
	}
	if st.Stdin != nil {
		go func() { // not waited for: see above
			err := copyChunks(p, StreamStdin, st.Stdin)
			if err == nil {
				_ = p.sendFrame(frame{Stream: StreamStdin, Close: true})
			}
		}()
	}
	for {
		select {
		case <-p.ctx.Done():
			if ctx.Err() != nil {
				_ = p.publish(frame{End: &end{Error: "canceled", Code: "Canceled"}})
				return ctx.Err()
			}
			return context.Cause(p.ctx)
		case f := <-p.recv:
			switch {
			case f.End != nil:
				switch {
				case f.End.Error != "":
					return codeErr(f.End.Code, f.End.Error)
				case f.End.ExitCode != 0:
					return &ExitError{Code: f.End.ExitCode}
				}
				return nil
			case len(f.Data) > 0:
				w := st.Stdout
				if f.Stream == StreamStderr {
					w = st.Stderr
				}
				if w != nil {
					if _, err := w.Write(f.Data); err != nil {
						_ = p.publish(frame{End: &end{Error: "client gone", Code: "Canceled"}})
						return fmt.Errorf("nodeexec: write stream %d: %w", f.Stream, err)
					}
				}
				p.wrote()
			}
		}
	}
}

// open asks the node to open the session.
func open(ctx context.Context, nc *nats.Conn, cfg Config, req Request) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(ctx, cfg.OpenTimeout)
	defer cancel()
	msg, err := pipeline.AskNode(octx, nc, OpenSubject(req.Node), req.Node, b)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w: node %q does not answer: %v", ErrLost, req.Node, err)
		}
		return fmt.Errorf("nodeexec: open on node %q: %w", req.Node, err)
	}
	var rep openReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return fmt.Errorf("nodeexec: decode open reply: %w", err)
	}
	if rep.Error != "" {
		return codeErr(rep.Code, rep.Error)
	}
	return nil
}

// copyChunks sends r on stream until EOF (nil) or an error.
func copyChunks(p *peer, stream int, r io.Reader) error {
	buf := make([]byte, p.cfg.Chunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if werr := p.write(stream, buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
