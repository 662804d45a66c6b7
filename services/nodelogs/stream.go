package nodelogs

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/bus"
)

// Options shape what a Stream returns (kubectl logs' flags).
type Options struct {
	// Follow waits for more while the container runs.
	Follow bool
	// Timestamps prefixes each record with its RFC3339Nano time.
	Timestamps bool
	// LimitBytes ends the stream after this many bytes of text (0: no
	// limit).
	LimitBytes int64
	// Poll is the pause of a follower at the end of the log. Default
	// 300ms.
	Poll time.Duration
	// AskTimeout bounds each chunk's request when ctx has no deadline.
	// Default 5s.
	AskTimeout time.Duration
}

// Stream reads a container's log from its node a chunk at a time.
type Stream struct {
	nc      *nats.Conn
	node    string
	req     Request
	opts    Options
	first   *Reply // the chunk Open read, not yet returned
	written int64
	done    bool
}

// Open starts reading req's log from node: it asks for the first chunk,
// so that a node that cannot serve it fails here (ErrNode) rather than in
// the middle of the output.
func Open(ctx context.Context, nc *nats.Conn, node string, req Request, opts Options) (*Stream, error) {
	if opts.Poll <= 0 {
		opts.Poll = 300 * time.Millisecond
	}
	if opts.AskTimeout <= 0 {
		opts.AskTimeout = 5 * time.Second
	}
	s := &Stream{nc: nc, node: node, req: req, opts: opts}
	rep, err := s.ask(ctx)
	if err != nil {
		return nil, err
	}
	s.first = &rep
	return s, nil
}

func (s *Stream) ask(ctx context.Context) (Reply, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.AskTimeout)
		defer cancel()
	}
	rep, err := Ask(ctx, s.nc, s.node, s.req)
	if err == nil {
		s.req.Offset, s.req.File = rep.Offset, rep.File
	}
	return rep, err
}

// Next returns the text of the next chunk (at most about ChunkBytes, with
// timestamps a little more), or io.EOF at the end: the instance is done
// and read, LimitBytes is reached, or (following) ctx ends.
func (s *Stream) Next(ctx context.Context) ([]byte, error) {
	for !s.done {
		var rep Reply
		if s.first != nil {
			rep, s.first = *s.first, nil
		} else {
			var err error
			if rep, err = s.ask(ctx); err != nil {
				return nil, err
			}
		}
		if len(rep.Data) > 0 {
			return s.text(rep.Data), nil
		}
		if !s.opts.Follow || !rep.Running {
			break
		}
		select {
		case <-ctx.Done():
			s.done = true
		case <-time.After(s.opts.Poll):
		}
	}
	s.done = true
	return nil, io.EOF
}

// text is the output of a chunk, cut at LimitBytes.
func (s *Stream) text(cri []byte) []byte {
	out := render(cri, s.opts.Timestamps)
	if s.opts.LimitBytes > 0 && s.written+int64(len(out)) >= s.opts.LimitBytes {
		out = out[:s.opts.LimitBytes-s.written]
		s.done = true
	}
	s.written += int64(len(out))
	return out
}

// Serve answers node's log requests on nc with read, each reply at most
// ChunkBytes of data (an *Error from read keeps its reason and message), from the moment it returns (bus.Subscribed, bounded
// by ctx). The caller unsubscribes.
func Serve(ctx context.Context, nc *nats.Conn, node string, read func(req Request, max int) (Reply, error)) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(Subject(node), func(msg *nats.Msg) {
		var req Request
		var rep Reply
		if err := json.Unmarshal(msg.Data, &req); err != nil {
			rep = Reply{Error: err.Error(), Reason: ReasonBadRequest}
		} else if rep, err = read(req, ChunkBytes); err != nil {
			rep = Reply{Error: err.Error()}
			if e, ok := errors.AsType[*Error](err); ok {
				rep.Error, rep.Reason = e.Message, e.Reason
			}
		}
		b, _ := json.Marshal(rep)
		_ = msg.Respond(b)
	})
	if err != nil {
		return nil, err
	}
	return sub, bus.Subscribed(ctx, nc, sub)
}
