package endpoints

import (
	"context"
	"sync"
	"time"

	"github.com/podflow/podflow/proto/corev1"
)

// serviceKey names a Service.
type serviceKey struct{ ns, name string }

// cause is a pod whose change queued a sync: the sync announces it
// joining or leaving the Service (EndpointsUpdated).
type cause struct {
	pod *corev1.Pod // as the pod watch saw it last (podwatch.go)
	at  time.Time   // when the pod watch first saw the change
}

// queued is a Service due a sync and the pods that caused it.
type queued struct {
	serviceKey
	causes []cause
}

// serviceQueue is the set of Services whose slice is due a sync: a key
// added while already queued is queued once (a burst of changes is one
// sync of the latest state), its causes merged (one per pod). Adds before
// open are dropped: the Services the informer lists at start are
// Reconcile's.
type serviceQueue struct {
	mu      sync.Mutex
	opened  bool
	pending map[serviceKey]int // index in order
	order   []queued
	ready   chan struct{} // holds a token while pending is not empty
}

func newServiceQueue() serviceQueue {
	return serviceQueue{pending: map[serviceKey]int{}, ready: make(chan struct{}, 1)}
}

func (q *serviceQueue) open() {
	q.mu.Lock()
	q.opened = true
	q.mu.Unlock()
}

// add queues the Service ns/name, caused by the pods of causes (none: a
// change of the Service or of its slices).
func (q *serviceQueue) add(ns, name string, causes ...cause) {
	k := serviceKey{ns, name}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.opened {
		return
	}
	i, ok := q.pending[k]
	if !ok {
		i = len(q.order)
		q.pending[k] = i
		q.order = append(q.order, queued{serviceKey: k})
	}
	it := &q.order[i]
next:
	for _, c := range causes {
		uid := c.pod.GetMetadata().GetUid()
		for j := range it.causes {
			if it.causes[j].pod.GetMetadata().GetUid() == uid {
				it.causes[j].pod = c.pod // the latest state, the first time
				continue next
			}
		}
		it.causes = append(it.causes, c)
	}
	if ok {
		return
	}
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// take waits for queued Services and returns them all, in the order they
// were first queued; false once ctx is done.
func (q *serviceQueue) take(ctx context.Context) ([]queued, bool) {
	select {
	case <-ctx.Done():
		return nil, false
	case <-q.ready:
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.order
	q.order = nil
	clear(q.pending)
	return items, true
}
