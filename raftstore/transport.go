package raftstore

import (
	"sync"

	"github.com/hashicorp/raft"
)

// guardedTransport is raft's NetworkTransport with a heartbeat handler
// that Shutdown can wait out. raft calls the heartbeat handler on the
// transport's connection goroutine, and its shutdown check happens before
// the handler runs: a heartbeat that got past it while raft shut down
// could still save the current term after the log store was closed, and
// raft panics when that fails ("failed to save current term: database not
// open"). quiesce waits for heartbeats in flight and refuses later ones.
type guardedTransport struct {
	*raft.NetworkTransport

	mu     sync.RWMutex
	closed bool
}

var _ raft.WithClose = (*guardedTransport)(nil)

// SetHeartbeatHandler installs cb behind the guard.
func (t *guardedTransport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		t.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	t.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		t.mu.RLock()
		defer t.mu.RUnlock()
		if t.closed {
			rpc.Respond(nil, raft.ErrRaftShutdown) // the transport waits for an answer
			return
		}
		cb(rpc)
	})
}

// quiesce returns once no heartbeat handler runs; later ones are refused.
// Idempotent.
func (t *guardedTransport) quiesce() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
}
