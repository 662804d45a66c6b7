package objects

import (
	"context"
	"sync"
	"time"
)

// freshReadTimeout bounds one store read of FreshReads.
const freshReadTimeout = 10 * time.Second

// freshReadsPerNamespace bounds the reads of one namespace in flight: a
// caller waits for at most a fraction of a read more than its own, and a
// burst of pods costs the store a few reads per round trip, not one per
// pod.
const freshReadsPerNamespace = 4

// FreshReads reads a namespace's objects from the store so that a read
// sees every write acknowledged before it was asked for (a linearizable
// list: a pod created right after a LimitRange gets its defaults, which
// an informer's cache, a moment behind, would miss), while handlers that
// ask at once for one namespace share reads: a caller joins the read that
// has not started yet, if there is one, else makes one — never one
// already running (it may have been served before the caller's writes).
// A read starts at once while fewer than freshReadsPerNamespace run, else
// when one of them ends.
type FreshReads[T any] struct {
	list func(ctx context.Context, ns string) ([]T, error)

	mu      sync.Mutex
	pending map[string]*freshRead[T] // made, not started yet
	running map[string]int
}

type freshRead[T any] struct {
	done  chan struct{}
	items []T
	err   error
}

// NewFreshReads shares the reads of list, one namespace at a time.
func NewFreshReads[T any](list func(ctx context.Context, ns string) ([]T, error)) *FreshReads[T] {
	return &FreshReads[T]{list: list, pending: map[string]*freshRead[T]{}, running: map[string]int{}}
}

// Get returns ns's objects as the store holds them now (or later).
func (f *FreshReads[T]) Get(ctx context.Context, ns string) ([]T, error) {
	f.mu.Lock()
	r := f.pending[ns]
	if r == nil {
		r = &freshRead[T]{done: make(chan struct{})}
		if f.running[ns] < freshReadsPerNamespace {
			f.running[ns]++
			go f.run(ns, r)
		} else {
			f.pending[ns] = r // started when a running read ends
		}
	}
	f.mu.Unlock()
	select {
	case <-r.done:
		return r.items, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run performs r, then the read waiting for its slot, if any. A read is
// bounded by its own timeout, not by one caller's context (others share
// it).
func (f *FreshReads[T]) run(ns string, r *freshRead[T]) {
	for r != nil {
		ctx, cancel := context.WithTimeout(context.Background(), freshReadTimeout)
		r.items, r.err = f.list(ctx, ns)
		cancel()
		close(r.done)
		f.mu.Lock()
		r = f.pending[ns]
		delete(f.pending, ns)
		if r == nil {
			if f.running[ns]--; f.running[ns] == 0 {
				delete(f.running, ns)
			}
		}
		f.mu.Unlock()
	}
}
