package raftstore

import (
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/proto/vt"
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
	if err := proto.Unmarshal(m.Data, &req); err != nil || req.Inbox == "" || req.FromRevision < 0 {
		n.respond(m, &storev1.WatchResponse{Error: toWire(newError(storev1.Code_CODE_INVALID, "", "bad watch request"))})
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

// streamWatch publishes every change under req.Prefix after
// req.FromRevision to req.Inbox, in revision order, in messages numbered
// from 1. Idle streams get heartbeats as requests; the stream ends when the
// client stops answering them, on an error (sent as the last message) or on
// shutdown (sent as Unavailable so the client resumes elsewhere at once).
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
	hb := time.NewTicker(n.cfg.WatchHeartbeat)
	defer hb.Stop()
	cursor, missed := req.FromRevision, 0
	keep := n.keeper(subject)
	acks := n.ackStream(subject)
	for {
		if n.ctx.Err() != nil {
			return
		}
		events, covered, changed, err := n.fsm.eventsAfterKept(req.Prefix, cursor, n.cfg.WatchBatch, maxWatchBytes, keep)
		if err != nil {
			send(&storev1.WatchMessage{Error: toWire(err)})
			return
		}
		if err := n.openEvents(events); err != nil {
			send(&storev1.WatchMessage{Error: toWire(err)})
			return
		}
		if len(events) > 0 {
			if !send(&storev1.WatchMessage{Events: events, Revision: covered}) {
				return
			}
			n.count.watchEvents.Add(uint64(len(events)))
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
		case <-changed:
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
