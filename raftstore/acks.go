package raftstore

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Acknowledgements. A replica streaming to a client (a watch's heartbeats,
// a list's windows) asks the client to acknowledge now and then. The
// acknowledgement goes to a subject of the store's own, not to an inbox of
// the replica's connection: answering into another identity's inbox needs
// the NATS server's dynamic reply permission ("allow responses"), which
// the server drops for every connection whenever it reloads its users (a
// bus user added or removed), so acknowledgements in flight then were
// refused and watches and lists restarted. A role may publish to the
// store's acknowledgement subjects of its own name only (the bus's subject
// permissions: services/pipeline), by name and not by grant.
//
// An acknowledgement subject is
//
//	<prefix>.ack.<replica token>.<stream id>-<n>[.<requester>]
//
// the replica token random per replica start, the stream id random per
// stream (96 bits: unguessable), n the request's number within the stream,
// and the requester the name the stream was asked under (none for an
// unnamed client). The replica counts an acknowledgement only on that exact
// subject, so only the requester's identity can send it, only for a stream
// whose id it was told, only for the request it answers: another identity
// can neither keep a stream going nor make it skip its flow control.

// newAckPrefix is the subject below which a replica receives
// acknowledgements: <prefix>.ack.<random token>.
func newAckPrefix(subj subjects) string {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return subj.ack + "." + hex.EncodeToString(b[:])
}

// acks routes the acknowledgements a replica receives to the request that
// waits for each.
type acks struct {
	mu      sync.Mutex
	waiting map[string]chan *nats.Msg // by acknowledgement subject
}

// deliver hands m to the request waiting for its subject; anything else (a
// late or forged acknowledgement) is dropped.
func (a *acks) deliver(m *nats.Msg) {
	a.mu.Lock()
	ch := a.waiting[m.Subject]
	a.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- m:
	default: // one acknowledgement per request is enough
	}
}

// ackStream is one stream's acknowledgement requests.
type ackStream struct {
	n    *Node
	base string // <ack prefix>.<stream id>-
	user string // the requester's name, "" when unnamed
	seq  uint64
}

// ackStream returns the acknowledgement requests of a stream asked for on
// subject (the requester's name is taken from it).
func (n *Node) ackStream(subject string) *ackStream {
	var b [12]byte
	_, _ = crand.Read(b[:])
	user, _ := n.requester(subject)
	return &ackStream{n: n, base: n.ackPrefix + "." + hex.EncodeToString(b[:]) + "-", user: user}
}

// request publishes data to the client's subject to with a fresh
// acknowledgement subject as its reply, and waits up to timeout (or ctx)
// for the client's acknowledgement. It returns nats.ErrNoResponders when
// nobody subscribes to, nats.ErrTimeout when no acknowledgement came,
// ctx's error when ctx ended, or the publish's error.
func (s *ackStream) request(ctx context.Context, to string, data []byte, timeout time.Duration) error {
	s.seq++
	subject := s.base + strconv.FormatUint(s.seq, 10)
	if s.user != "" {
		subject += "." + s.user
	}
	ch := make(chan *nats.Msg, 1)
	a := &s.n.acks
	a.mu.Lock()
	a.waiting[subject] = ch
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.waiting, subject)
		a.mu.Unlock()
	}()
	if err := s.n.cfg.Conn.PublishMsg(&nats.Msg{Subject: to, Reply: subject, Data: data}); err != nil {
		return err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case m := <-ch:
		// The server answers a message nobody receives with a 503 status
		// to its reply subject.
		if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
			return nats.ErrNoResponders
		}
		return nil
	case <-t.C:
		return nats.ErrTimeout
	case <-ctx.Done():
		return ctx.Err()
	}
}
