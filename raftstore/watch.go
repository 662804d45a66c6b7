package raftstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/proto/vt"
	"google.golang.org/protobuf/proto"
)

// Watch is a stream of the changes under a prefix. It resumes by itself on
// another replica when its replica dies or a message is lost, from the last
// revision it delivered, so Events carries every change in revision order
// with no gaps and no duplicates until it is closed.
type Watch struct {
	c      *Client
	prefix string
	except []string // WatchExcept
	events chan WatchEvent
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before events is closed

	// last is the revision up to which every change under the prefix has
	// been delivered: the last event's, or later when the replica said it
	// had sent everything up to a later one. A resume starts there, so a
	// watch of a prefix that rarely changes resumes from a recent revision,
	// not from its last event, which the history may have compacted.
	last     int64
	progress atomic.Int64 // last, for Progress
}

// Watch starts a watch of every change under prefix with revision >
// fromRev, but those opts leave out (WatchExcept). It fails with ErrGone
// when fromRev is older than the compacted history: relist and watch from
// the list's revision. The watch ends when ctx ends, Stop is called, or
// the history it needs is compacted (ErrGone).
func (c *Client) Watch(ctx context.Context, prefix string, fromRev int64, opts ...WatchOption) (*Watch, error) {
	if fromRev < 0 {
		return nil, newError(storev1.Code_CODE_INVALID, prefix, "watch from revision %d", fromRev)
	}
	except := WatchExceptOf(opts...)
	wctx, cancel := context.WithCancel(ctx)
	w := &Watch{c: c, prefix: prefix, except: except, events: make(chan WatchEvent, c.cfg.WatchBuffer), ctx: wctx, cancel: cancel, done: make(chan struct{}), last: fromRev}
	w.progress.Store(fromRev)
	sess, err := w.open()
	if err != nil {
		cancel()
		return nil, err
	}
	go w.run(sess)
	return w, nil
}

// Progress returns the revision up to which every change under the prefix
// has been delivered on Events (as etcd's progress notifications and
// Kubernetes' watch bookmarks tell it): at least the last event's, later
// when the replica reported that nothing more matched up to a later one.
func (w *Watch) Progress() int64 { return w.progress.Load() }

// Events returns the channel of changes. It is closed when the watch ends;
// then Err says why.
func (w *Watch) Events() <-chan WatchEvent { return w.events }

// Err returns why the watch ended (context.Canceled after Stop, the ctx's
// error, ErrGone, ...); nil while it runs.
func (w *Watch) Err() error {
	select {
	case <-w.done:
		return w.err
	default:
		return nil
	}
}

// Stop ends the watch and waits for its goroutine to exit. Idempotent.
func (w *Watch) Stop() {
	w.cancel()
	<-w.done
}

// session is one stream from one replica.
type session struct {
	sub  *nats.Subscription
	msgs chan *nats.Msg
	lost chan struct{} // closed when a message could not be buffered
	once sync.Once
}

func (s *session) close() { _ = s.sub.Unsubscribe() }

// open subscribes a fresh inbox and asks a replica to stream to it from
// w.last. Heartbeats are answered from the subscription callback, so a slow
// reader of Events does not look dead; a full buffer marks the session lost.
func (w *Watch) open() (*session, error) {
	s := &session{msgs: make(chan *nats.Msg, w.c.cfg.WatchBuffer), lost: make(chan struct{})}
	inbox := w.c.nc.NewInbox()
	sub, err := w.c.nc.Subscribe(inbox, func(m *nats.Msg) {
		w.c.ack(m)
		select {
		case s.msgs <- m:
		default:
			s.once.Do(func() { close(s.lost) })
		}
	})
	if err != nil {
		return nil, fmt.Errorf("%w: watch subscribe: %w", ErrUnavailable, err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	s.sub = sub
	data, _ := proto.Marshal(&storev1.WatchRequest{Prefix: w.prefix, Except: w.except, FromRevision: w.last, Inbox: inbox})
	var resp storev1.WatchResponse
	if err := w.c.do(w.ctx, w.c.named(w.c.subj.watch), data, &resp, false, func() *storev1.Error { return resp.Error }); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (w *Watch) run(s *session) {
	defer close(w.done)
	defer close(w.events)
	for {
		err := w.stream(s)
		s.close()
		if w.ctx.Err() != nil {
			w.err = w.ctx.Err()
			return
		}
		if err != nil {
			w.err = err
			return
		}
		// Resume from the last delivered revision on whichever replica answers.
		for {
			s, err = w.open()
			if err == nil {
				break
			}
			if w.ctx.Err() != nil {
				w.err = w.ctx.Err()
				return
			}
			if errors.Is(err, ErrGone) || errors.Is(err, ErrInvalid) {
				w.err = err
				return
			}
		}
	}
}

// stream delivers one session's events. It returns nil when the session
// should be resumed elsewhere, or the error that ends the watch.
func (w *Watch) stream(s *session) error {
	var seq uint64
	idle := time.NewTimer(w.c.cfg.WatchHeartbeatTimeout)
	defer idle.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return nil
		case <-s.lost:
			return nil
		case <-idle.C:
			if len(s.msgs) > 0 {
				idle.Reset(w.c.cfg.WatchHeartbeatTimeout) // we were slow, not the replica
				continue
			}
			return nil
		case m := <-s.msgs:
			idle.Reset(w.c.cfg.WatchHeartbeatTimeout)
			var msg storev1.WatchMessage
			if vt.Unmarshal(m.Data, &msg) != nil || msg.Seq != seq+1 {
				return nil // lost or garbled: resume
			}
			seq = msg.Seq
			if err := fromWire(msg.Error); err != nil {
				if errors.Is(err, ErrGone) || errors.Is(err, ErrInternal) {
					return err // another replica would say the same
				}
				return nil // Unavailable (replica shutting down) and others: resume
			}
			last := w.last
			for _, e := range msg.Events {
				if e.Revision <= w.last {
					continue // already delivered before a resume
				}
				ev := WatchEvent{Type: EventPut, KV: kvFromWire(e.Kv), Revision: e.Revision}
				if e.Type == storev1.EventType_EVENT_TYPE_DELETE {
					ev.Type = EventDelete
				}
				select {
				case w.events <- ev:
				case <-w.ctx.Done():
					return nil
				}
				last = max(last, e.Revision)
			}
			// Every change under the prefix up to msg.Revision was in this
			// message or an earlier one of the session (seq has no gaps).
			w.last = max(last, msg.Revision)
			w.progress.Store(w.last)
		}
	}
}
