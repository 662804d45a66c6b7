package endpoints

import (
	"context"
	"sync"
)

// serviceKey names a Service.
type serviceKey struct{ ns, name string }

// serviceQueue is the set of Services whose slice is due a sync: a key
// added while already queued is queued once (a burst of changes is one
// sync of the latest state). Adds before open are dropped: the Services
// the informer lists at start are Reconcile's.
type serviceQueue struct {
	mu      sync.Mutex
	opened  bool
	pending map[serviceKey]bool
	order   []serviceKey
	ready   chan struct{} // holds a token while pending is not empty
}

func newServiceQueue() serviceQueue {
	return serviceQueue{pending: map[serviceKey]bool{}, ready: make(chan struct{}, 1)}
}

func (q *serviceQueue) open() {
	q.mu.Lock()
	q.opened = true
	q.mu.Unlock()
}

func (q *serviceQueue) add(ns, name string) {
	k := serviceKey{ns, name}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.opened || q.pending[k] {
		return
	}
	q.pending[k] = true
	q.order = append(q.order, k)
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// take waits for queued keys and returns them all, in the order they were
// first queued; false once ctx is done.
func (q *serviceQueue) take(ctx context.Context) ([]serviceKey, bool) {
	select {
	case <-ctx.Done():
		return nil, false
	case <-q.ready:
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	keys := q.order
	q.order = nil
	clear(q.pending)
	return keys, true
}
