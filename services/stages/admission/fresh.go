package admission

import (
	"context"
	"sync"
	"time"
)

// freshReadTimeout bounds one store read of freshReads.
const freshReadTimeout = 10 * time.Second

// freshReads reads a namespace's objects from the store so that a read
// sees every write acknowledged before it was asked for (a linearizable
// list: a pod created right after a LimitRange gets its defaults, which
// an informer's cache, a moment behind, would miss), while handlers that
// ask at once for one namespace share reads: a caller joins a read that
// has not started yet, never one already running (it may have been
// served before the caller's writes), so one read at a time runs per
// namespace and at most one waits behind it.
type freshReads[T any] struct {
	list func(ctx context.Context, ns string) ([]T, error)

	mu      sync.Mutex
	running map[string]*freshRead[T] // started
	waiting map[string]*freshRead[T] // to start when the running one ends
}

type freshRead[T any] struct {
	done  chan struct{}
	items []T
	err   error
}

func newFreshReads[T any](list func(ctx context.Context, ns string) ([]T, error)) *freshReads[T] {
	return &freshReads[T]{list: list, running: map[string]*freshRead[T]{}, waiting: map[string]*freshRead[T]{}}
}

// get returns ns's objects as the store holds them now (or later).
func (f *freshReads[T]) get(ctx context.Context, ns string) ([]T, error) {
	f.mu.Lock()
	r := f.waiting[ns]
	switch {
	case r != nil: // joins the next read
	case f.running[ns] != nil:
		r = &freshRead[T]{done: make(chan struct{})}
		f.waiting[ns] = r
	default:
		r = &freshRead[T]{done: make(chan struct{})}
		f.running[ns] = r
		go f.run(ns, r)
	}
	f.mu.Unlock()
	select {
	case <-r.done:
		return r.items, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run performs r, then starts the read waiting behind it, if any. A read
// is bounded by its own timeout, not by one caller's context (others
// share it).
func (f *freshReads[T]) run(ns string, r *freshRead[T]) {
	for r != nil {
		ctx, cancel := context.WithTimeout(context.Background(), freshReadTimeout)
		r.items, r.err = f.list(ctx, ns)
		cancel()
		close(r.done)
		f.mu.Lock()
		r = f.waiting[ns]
		delete(f.waiting, ns)
		if r != nil {
			f.running[ns] = r
		} else {
			delete(f.running, ns)
		}
		f.mu.Unlock()
	}
}
