package raftstore

import (
	"sync"
	"unsafe"

	"github.com/podflow/podflow/proto/storev1"
)

// handed holds the commands the leader has decoded already, by the log
// data they were decoded from. The leader's handleWrite decodes each write
// to check it, then proposes those very bytes; hashicorp/raft hands the
// leader's state machine the entry's Data slice it was given, so the state
// machine applies that decode instead of unmarshalling the same bytes a
// second time (the leader spent ~6% of its profile there). Only the same
// slice — the same first byte and length — matches: an entry read back
// from the log, or one a follower received, is decoded as before. The
// commands are identical either way: what handleWrite adds to what it
// decoded (a confined write's pinning compares, sealed values) is in the
// bytes it proposes too (appendCompares, seal), and the map's key keeps
// that slice's bytes alive, so no other data can come to share its
// address while it is held.
type handed struct {
	mu sync.Mutex
	m  map[*byte]handedCmd // by the data's first byte
}

type handedCmd struct {
	n   int
	cmd *storev1.Command
}

// hand records cmd as data's decode until release(data) (after the
// proposal's future has answered, applied or not).
func (h *handed) hand(data []byte, cmd *storev1.Command) {
	if len(data) == 0 {
		return
	}
	h.mu.Lock()
	if h.m == nil {
		h.m = make(map[*byte]handedCmd)
	}
	h.m[unsafe.SliceData(data)] = handedCmd{n: len(data), cmd: cmd}
	h.mu.Unlock()
}

// release forgets data's decode.
func (h *handed) release(data []byte) {
	if len(data) == 0 {
		return
	}
	h.mu.Lock()
	delete(h.m, unsafe.SliceData(data))
	h.mu.Unlock()
}

// take returns data's decode when the leader handed one over for this
// very slice.
func (h *handed) take(data []byte) (*storev1.Command, bool) {
	if len(data) == 0 {
		return nil, false
	}
	h.mu.Lock()
	c, ok := h.m[unsafe.SliceData(data)]
	h.mu.Unlock()
	if !ok || c.n != len(data) {
		return nil, false
	}
	return c.cmd, true
}
