package raftstore

import (
	"cmp"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/proto/vt"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// maxWatchBytes bounds the encoded events of one watch message, well under
// NATS's default 1 MiB max payload.
const maxWatchBytes = 512 << 10

// handleWatch accepts a watch: it answers the request (an error such as
// Gone, or success) and streams the changes to the client's inbox from a
// goroutine owned by the node.
func (n *Node) handleWatch(m *nats.Msg) {
	n.count.watches.Add(1)
	var req storev1.WatchRequest
	if err := vt.Unmarshal(m.Data, &req); err != nil || req.Inbox == "" || req.FromRevision < 0 {
		n.respond(m, &storev1.WatchResponse{Error: toWire(newError(storev1.Code_CODE_INVALID, "", "bad watch request"))})
		return
	}
	if err := checkExcept(req.Except); err != nil {
		n.respond(m, &storev1.WatchResponse{Replica: n.cfg.ID, Error: toWire(err)})
		return
	}
	if err := n.checkInbox(m.Subject, req.Inbox); err != nil {
		n.respond(m, &storev1.WatchResponse{Replica: n.cfg.ID, Error: toWire(err)})
		return
	}
	if err := n.checkRead(m.Subject, req.Prefix, true); err != nil {
		n.respond(m, &storev1.WatchResponse{Replica: n.cfg.ID, Error: toWire(err)})
		return
	}
	_, compact := n.fsm.revisions()
	if req.FromRevision < compact {
		n.respond(m, &storev1.WatchResponse{Replica: n.cfg.ID, CompactRevision: compact, Error: toWire(newError(storev1.Code_CODE_GONE, "", "revision %d is compacted (oldest watchable %d)", req.FromRevision, compact))})
		return
	}
	n.respond(m, &storev1.WatchResponse{Replica: n.cfg.ID, CompactRevision: compact})
	n.goFunc(func() { n.streamWatch(m.Subject, &req) })
}

// MaxWatchExcept is how many prefixes a watch may leave out (WatchExcept):
// each is compared with every change the watch's prefix matches.
const MaxWatchExcept = 16

// checkExcept refuses a watch's excluded prefixes when there are more than
// MaxWatchExcept or one is empty (it would leave out everything).
func checkExcept(except []string) error {
	if len(except) > MaxWatchExcept {
		return newError(storev1.Code_CODE_INVALID, "", "bad watch request: %d excluded prefixes (at most %d)", len(except), MaxWatchExcept)
	}
	if slices.Contains(except, "") {
		return newError(storev1.Code_CODE_INVALID, "", "bad watch request: an excluded prefix is empty")
	}
	return nil
}

// streamWatch publishes every change under req.Prefix (but under none of
// req.Except) after req.FromRevision to req.Inbox, in revision order, in
// messages numbered from 1. Idle streams get heartbeats as requests; the
// stream ends when the client stops answering them, on an error (sent as
// the last message) or on shutdown (sent as Unavailable so the client
// resumes elsewhere at once).
func (n *Node) streamWatch(subject string, req *storev1.WatchRequest) {
	nc := n.cfg.Conn
	var seq uint64
	send := func(msg *storev1.WatchMessage) bool {
		seq++
		msg.Seq = seq
		data, err := vt.Marshal(msg)
		if err != nil {
			return false
		}
		return nc.Publish(req.Inbox, data) == nil
	}
	// buf is the stream's message buffer: Publish copies what it is given.
	var buf []byte
	hb := time.NewTicker(n.cfg.WatchHeartbeat)
	defer hb.Stop()
	cursor, missed := req.FromRevision, 0
	keep := n.keeper(subject)
	acks := n.ackStream(subject)
	for {
		if n.ctx.Err() != nil {
			return
		}
		wake := n.watchWake() // before the scan: a later change closes it
		events, covered, changed, err := n.fsm.eventsAfterKept(req.Prefix, req.Except, cursor, n.cfg.WatchBatch, maxWatchBytes, keep)
		if err != nil {
			send(&storev1.WatchMessage{Error: toWire(err)})
			return
		}
		if len(events) > 0 {
			buf, err = n.appendWatchEvents(buf[:0], seq+1, events, covered)
			if err != nil {
				var open *Error
				if errors.As(err, &open) { // a value that cannot be decrypted
					send(&storev1.WatchMessage{Error: toWire(err)})
				}
				return
			}
			seq++
			if nc.Publish(req.Inbox, buf) != nil {
				return
			}
			n.count.watchEvents.Add(uint64(len(events)))
			if cap(buf) > maxWatchBytes<<1 {
				buf = nil // one oversized event: do not hold its buffer
			}
		}
		more := covered > cursor && len(events) > 0
		cursor = max(cursor, covered)
		if more {
			continue // drain the backlog before waiting
		}
		select {
		case <-n.ctx.Done():
			send(&storev1.WatchMessage{Error: toWire(newError(storev1.Code_CODE_UNAVAILABLE, "", "replica %q shutting down", n.cfg.ID))})
			return
		case <-cmp.Or(wake, changed):
		case <-hb.C:
			seq++
			data, _ := proto.Marshal(&storev1.WatchMessage{Seq: seq, Revision: cursor})
			err := acks.request(n.ctx, req.Inbox, data, n.cfg.WatchHeartbeat)
			switch {
			case err == nil:
				missed = 0
			case errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrConnectionClosed), n.ctx.Err() != nil:
				return
			default:
				if missed++; missed >= n.cfg.WatchMissedHeartbeats {
					return
				}
			}
		}
	}
}

// WatchMessage's field numbers, for appendWatchEvents.
const (
	watchMessageSeq      protowire.Number = 1
	watchMessageEvents   protowire.Number = 2
	watchMessageRevision protowire.Number = 3
)

// appendWatchEvents appends to b the WatchMessage{Seq: seq, Events:
// events, Revision: revision} as vt.Marshal encodes it, the events opened
// (decrypted) for the watcher. It fails with an *Error when a value cannot
// be decrypted, another error when an event cannot be encoded. A stored event's encoding comes from the
// replica's wireCache, so an event is encoded once however many streams
// carry it; an opened copy is encoded for this message alone.
func (n *Node) appendWatchEvents(b []byte, seq uint64, events []*storev1.Event, revision int64) ([]byte, error) {
	b = protowire.AppendTag(b, watchMessageSeq, protowire.VarintType)
	b = protowire.AppendVarint(b, seq)
	for _, e := range events {
		kv, err := n.openKV(e.Kv)
		if err != nil {
			return b, err
		}
		var enc []byte
		if kv == e.Kv {
			enc, err = n.wire.get(e, n.cfg.WatchCacheBytes)
		} else {
			enc, err = vt.Marshal(&storev1.Event{Type: e.Type, Kv: kv, Revision: e.Revision})
		}
		if err != nil {
			return b, err
		}
		b = protowire.AppendTag(b, watchMessageEvents, protowire.BytesType)
		b = protowire.AppendBytes(b, enc)
	}
	if revision != 0 {
		b = protowire.AppendTag(b, watchMessageRevision, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(revision))
	}
	return b, nil
}

// wireCache holds the encodings of recent stored events, keyed by the
// (immutable) stored event: every watch stream of a replica that carries
// an event shares its one encoding. It keeps two generations of about
// wireCacheBytes each: when the current one is full it becomes the
// previous and the oldest is dropped, so watchers near the head (nearly
// all) hit and a watcher catching up from far behind encodes for itself.
// Keys are stored events, kept alive by the cache: an address is never
// reused while it is a key.
type wireCache struct {
	mu        sync.Mutex
	cur, prev map[*storev1.Event][]byte
	size      int // bytes in cur
}

// get returns e's encoding, encoding it on a miss, with generations of
// limit bytes (0: no cache).
func (c *wireCache) get(e *storev1.Event, limit int) ([]byte, error) {
	if limit <= 0 {
		return vt.Marshal(e)
	}
	c.mu.Lock()
	b, ok := c.cur[e]
	if !ok {
		if b, ok = c.prev[e]; ok {
			c.putLocked(e, b, limit)
		}
	}
	c.mu.Unlock()
	if ok {
		return b, nil
	}
	b, err := vt.Marshal(e)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.putLocked(e, b, limit)
	c.mu.Unlock()
	return b, nil
}

func (c *wireCache) putLocked(e *storev1.Event, b []byte, limit int) {
	if c.cur == nil || c.size+len(b) > limit {
		c.prev, c.cur, c.size = c.cur, make(map[*storev1.Event][]byte), 0
	}
	c.cur[e] = b
	c.size += len(b)
}

// wake is the channel coalesceWakes closes a while after each change.
type wake struct {
	mu sync.Mutex
	ch chan struct{}
}

// watchWake returns a channel closed a while (Config.WatchCoalesce) after
// the next change, or nil when streams wake at every change.
func (n *Node) watchWake() <-chan struct{} {
	if n.cfg.WatchCoalesce <= 0 {
		return nil
	}
	n.wake.mu.Lock()
	defer n.wake.mu.Unlock()
	if n.wake.ch == nil {
		n.wake.ch = make(chan struct{})
	}
	return n.wake.ch
}

// coalesceWakes wakes the watch streams WatchCoalesce after a change, once
// for all the changes meanwhile: one goroutine and one timer for the
// replica instead of a wake-up per commit for each stream. It takes the
// next change's channel before it wakes the streams, so a change after
// that wakes them again, and one before is seen by their scan. next, the
// first change's channel, is taken before any stream takes a wake channel.
func (n *Node) coalesceWakes(next <-chan struct{}) {
	t := time.NewTimer(n.cfg.WatchCoalesce)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-next:
		}
		t.Reset(n.cfg.WatchCoalesce)
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		next = n.fsm.changes()
		n.wake.mu.Lock()
		if n.wake.ch != nil {
			close(n.wake.ch)
			n.wake.ch = nil
		}
		n.wake.mu.Unlock()
	}
}
