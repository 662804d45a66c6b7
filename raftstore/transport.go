package raftstore

import (
	"errors"
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

// peerAddrProvider dials the peers of Config.PeerAddrs at their override;
// an error makes raft dial the configured address.
type peerAddrProvider map[string]string

var errNoOverride = errors.New("raftstore: no dial override")

func (p peerAddrProvider) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	if a, ok := p[string(id)]; ok {
		return raft.ServerAddress(a), nil
	}
	return "", errNoOverride
}

// peerAddrs is c's dial overrides for raft, nil without any.
func (c Config) peerAddrs() raft.ServerAddressProvider {
	if len(c.PeerAddrs) == 0 {
		return nil
	}
	p := make(peerAddrProvider, len(c.PeerAddrs))
	for id, a := range c.PeerAddrs {
		p[id] = a
	}
	return p
}
