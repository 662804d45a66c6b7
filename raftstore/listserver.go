package raftstore

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/proto/vt"
)

// Chunked lists. A list's answer can be far larger than one bus message
// (NATS's max payload, 8 MiB on podflow's bus): a reply past it is dropped
// and the reader waits for nothing. A chunked read request
// (ReadRequest.chunked) is answered by a stream of ReadResponse messages on
// its reply subject, the reader's own inbox: numbered from 1, each at most
// about a chunk's bytes of key-values (one key-value at least), the last
// one marked. Every chunk is cut from one list taken under the state
// machine's read lock — pointers to immutable records — so the whole
// answer is the key space at one revision, however long the sending takes.
//
// Flow control: once a window of bytes is sent and not acknowledged, the
// next chunk goes with an acknowledgement subject of the store's as its
// reply (acks.go), and the replica waits (listAckTimeout at most) for the
// reader's empty acknowledgement there before sending more, so a slow reader
// holds at most about a window in the bus's buffers and its own. A reader
// that went away (no responders) or stays silent ends the stream.
const (
	maxListChunkBytes = 2 << 20
	listWindowChunks  = 4
	listAckTimeout    = 10 * time.Second
)

// listChunkBytes is the bytes of key-values per chunk on this replica's
// connection: half its max payload (room for encoding), at most
// Config.ListChunkBytes or else maxListChunkBytes.
func (n *Node) listChunkBytes() int {
	limit := maxListChunkBytes
	if n.cfg.ListChunkBytes > 0 {
		limit = n.cfg.ListChunkBytes
	}
	if p := int(n.cfg.Conn.MaxPayload()); p > 0 {
		limit = min(limit, p/2)
	}
	return max(limit, 1)
}

// streamList sends kvs, read at rev (more: a limited list stopped early),
// to m's reply subject in chunks.
func (n *Node) streamList(m *nats.Msg, kvs []*storev1.KeyValue, rev int64, more bool) {
	if m.Reply == "" {
		return
	}
	budget, window := n.listChunkBytes(), 0
	acks := n.ackStream(m.Subject)
	var seq uint64
	send := func(resp *storev1.ReadResponse) error {
		seq++
		resp.Chunk = seq
		data, err := vt.Marshal(resp)
		if err != nil {
			return err
		}
		window += len(data)
		if window < listWindowChunks*budget || resp.Last {
			return n.cfg.Conn.Publish(m.Reply, data)
		}
		window = 0
		return acks.request(n.ctx, m.Reply, data, listAckTimeout)
	}
	for start := 0; ; {
		end, size := start, 0
		for end < len(kvs) && (end == start || size+kvBytes(kvs[end]) <= budget) {
			size += kvBytes(kvs[end])
			end++
		}
		chunk := kvs[start:end:end]
		if err := n.openKVs(chunk); err != nil {
			_ = send(&storev1.ReadResponse{Error: toWire(err), Last: true})
			return
		}
		last := end == len(kvs)
		resp := &storev1.ReadResponse{Revision: rev, Kvs: chunk, Last: last}
		if last {
			resp.More = more
		}
		if err := send(resp); err != nil {
			if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, context.Canceled) {
				n.log.Warn("list stream ended", "key_count", len(kvs), "sent", start, "error", err)
			}
			return
		}
		if last {
			return
		}
		start = end
	}
}

// kvBytes is about what kv takes in a chunk.
func kvBytes(kv *storev1.KeyValue) int { return len(kv.Key) + len(kv.Value) + 24 }
