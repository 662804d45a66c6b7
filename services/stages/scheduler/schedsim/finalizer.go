package schedsim

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// Finalizer stands in for the node agents and the status stage in
// preemption tests: for each PodDeleteRequested in the events stream it
// removes the pod (still of that uid and terminating) from the store and
// releases its NodeAllocation entry in one transaction, as the status
// stage's finalizeDeletion does once the node reports the pod gone. It
// does not wait out grace periods, and it acts only on requests: a pod
// marked terminating whose deletion nobody requested stays.
type Finalizer struct {
	cc     jetstream.ConsumeContext
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	requested map[string]int // uid -> PodDeleteRequested seen
	err       error
}

// StartFinalizer starts a Finalizer; Stop it (Close does too).
func (e *Env) StartFinalizer(ctx context.Context) (*Finalizer, error) {
	cons, err := e.Conn.JetStream().OrderedConsumer(ctx, bus.EventsStream,
		jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.TypeFilter("PodDeleteRequested")}})
	if err != nil {
		return nil, fmt.Errorf("schedsim: finalizer: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	f := &Finalizer{cancel: cancel, requested: map[string]int{}}
	work := make(chan [3]string, 4096)
	f.cc, err = cons.Consume(func(m jetstream.Msg) {
		env, err := bus.DecodeEnvelope(m.Data())
		if err != nil {
			return
		}
		f.mu.Lock()
		f.requested[env.GetPodUid()]++
		f.mu.Unlock()
		select {
		case work <- [3]string{env.GetNamespace(), env.GetPodName(), env.GetPodUid()}:
		case <-rctx.Done():
		}
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("schedsim: finalizer: %w", err)
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			select {
			case <-rctx.Done():
				return
			case w := <-work:
				if err := e.finalize(rctx, w[0], w[1], w[2]); err != nil && rctx.Err() == nil {
					f.mu.Lock()
					f.err = errors.Join(f.err, err)
					f.mu.Unlock()
				}
			}
		}
	}()
	e.mu.Lock()
	e.finalizers = append(e.finalizers, f)
	e.mu.Unlock()
	return f, nil
}

// Requested returns how many PodDeleteRequested the pod uid had.
func (f *Finalizer) Requested(uid string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requested[uid]
}

// Err returns the finalizations that failed.
func (f *Finalizer) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Stop stops the Finalizer; it is idempotent.
func (f *Finalizer) Stop() {
	f.cc.Stop()
	f.cancel()
	f.wg.Wait()
}

// finalize removes a terminating pod and its allocation entry.
func (e *Env) finalize(ctx context.Context, ns, name, uid string) error {
	for {
		pod, err := objects.Get[*corev1.Pod](ctx, e.Store, ns, name)
		if errors.Is(err, raftstore.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if pod.GetMetadata().GetUid() != uid || pod.GetMetadata().GetDeletionTimestamp() == nil {
			return nil
		}
		txn := objects.Txn{}.Unchanged(pod).Delete(pod)
		if node := pod.GetSpec().GetNodeName(); node != "" {
			alloc, err := objects.Get[*corev1.NodeAllocation](ctx, e.Store, "", node)
			switch {
			case err == nil:
				if _, held := alloc.GetPods()[uid]; held {
					delete(alloc.Pods, uid)
					txn = txn.Unchanged(alloc).Put(alloc)
				}
			case !errors.Is(err, raftstore.ErrNotFound):
				return err
			}
		}
		_, err = e.Store.Commit(ctx, txn)
		if errors.Is(err, raftstore.ErrConflict) {
			continue
		}
		return err
	}
}
